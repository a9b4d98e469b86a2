"""`actor_rollout_ref.actor` and `.ref`: the trained policy and its frozen reference."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import ClassVar

from verl.utils.config import BaseConfig
from verl.utils.debug import ProfilerConfig
from verl.workers.config.aliases import unify
from verl.workers.config.checkpoint import CheckpointConfig
from verl.workers.config.engine import FSDPConfig, QATEngineConfig, RefFSDPConfig
from verl.workers.config.optimizer import OptimConfig

__all__ = ["FSDPActorConfig", "McoreActorConfig", "ActorConfig", "PolicyLossConfig", "RefConfig"]


@dataclass
class PolicyLossConfig(BaseConfig):
    """`actor.policy_loss`: the loss variant (any name registered with `register_policy_loss`) and its parameters."""

    loss_mode: str = "vanilla"
    clip_cov_ratio: float = 0.0002
    clip_cov_lb: float = 1.0
    clip_cov_ub: float = 5.0
    kl_cov_ratio: float = 0.0002
    ppo_kl_coef: float = 0.1
    # the SAPO temperatures as this project read them before verl 0.9 moved them to the actor (`actor.tau_pos`)
    tau_pos: float = 1.0
    tau_neg: float = 1.05
    dro_beta: float | None = None


# keys of a policy section that verl 0.9 also gives its engine block (`fsdp_config`), which the engine reads there:
# the two spellings are unified when the section is built (the fsdp_config ones follow the section's by default)
_ENGINE_KEYS = (
    "ulysses_sequence_parallel_size",
    "use_torch_compile",
    "entropy_from_logits_with_chunking",
    "entropy_from_logits_chunk_size",
    "entropy_checkpointing",
    "pad_to_length",
)


def _unify_engine_keys(section) -> None:
    for key in _ENGINE_KEYS:
        unify(section, f"fsdp_config.{key}", key)


@dataclass
class ActorConfig(BaseConfig):
    """`actor_rollout_ref.actor`. The worker rewrites the batch sizes to per-rank values at start-up.

    Older spellings unified with verl 0.9's when built (`aliases.unify`): `grad_clip` with `optim.clip_grad`,
    `policy_loss.tau_pos/tau_neg` with `tau_pos/tau_neg`, the forward's keys with `fsdp_config`'s, and verl 0.7's
    `use_gpg_loss=True` with `policy_loss.loss_mode=gpg`.
    """

    strategy: str = "fsdp"
    ppo_mini_batch_size: int = 256
    ppo_micro_batch_size: int | None = None
    ppo_micro_batch_size_per_gpu: int | None = None
    use_dynamic_bsz: bool = False
    ppo_max_token_len_per_gpu: int = 16384
    grad_clip: float = 1.0
    clip_ratio: float = 0.2
    clip_ratio_low: float | None = 0.2
    clip_ratio_high: float | None = 0.2
    policy_loss: PolicyLossConfig = field(default_factory=PolicyLossConfig)
    clip_ratio_c: float = 3.0
    loss_agg_mode: str = "token-mean"
    entropy_coeff: float = 0.0
    use_kl_loss: bool = False
    use_torch_compile: bool = True
    kl_loss_coef: float = 0.001
    kl_loss_type: str = "low_var_kl"
    ppo_epochs: int = 1
    shuffle: bool = False
    ulysses_sequence_parallel_size: int = 1
    entropy_from_logits_with_chunking: bool = False
    entropy_checkpointing: bool = False
    checkpoint: CheckpointConfig = field(default_factory=CheckpointConfig)
    optim: OptimConfig = field(default_factory=OptimConfig)
    fsdp_config: FSDPConfig = field(default_factory=FSDPConfig)
    profiler: ProfilerConfig = field(default_factory=ProfilerConfig)
    use_remove_padding: bool = True
    use_fused_kernels: bool = False
    rollout_n: int = 1
    tau_pos: float = 1.0
    tau_neg: float = 1.05
    freeze_vision_tower: bool = False
    loss_scale_factor: int | None = None
    calculate_entropy: bool = False
    calculate_sum_pi_squared: bool = False
    use_prefix_grouper: bool = False
    data_loader_seed: int = 42
    entropy_from_logits_chunk_size: int = 2048
    pad_to_length: bool = False
    qat: QATEngineConfig = field(default_factory=QATEngineConfig)
    use_gpg_loss: bool = False

    def __post_init__(self) -> None:
        super().__post_init__()
        # the reference's size interpolates the actor's top-level key only: note when verl 0.9's spelling gave it
        sp_in_block = self.ulysses_sequence_parallel_size == 1 != self.fsdp_config.ulysses_sequence_parallel_size
        self.__dict__["_sp_from_engine_block"] = sp_in_block
        _unify_engine_keys(self)
        unify(self, "optim.clip_grad", "grad_clip")
        unify(self, "tau_pos", "policy_loss.tau_pos")
        unify(self, "tau_neg", "policy_loss.tau_neg")
        if self.use_gpg_loss:  # verl 0.7's switch to the GPG loss: the loss mode that is that loss
            mode = self.policy_loss.loss_mode
            if mode == "vanilla":
                self.policy_loss.loss_mode = "gpg"
            elif mode != "gpg":
                conflicts = self.__dict__.setdefault("_alias_conflicts", [])
                conflicts.append(("policy_loss.loss_mode", mode, "use_gpg_loss", True))

    @property
    def clip_range(self) -> tuple[float, float]:
        """(low, high) clip range: `clip_ratio_low/high`, each falling back to `clip_ratio` when null."""
        low = self.clip_ratio if self.clip_ratio_low is None else self.clip_ratio_low
        high = self.clip_ratio if self.clip_ratio_high is None else self.clip_ratio_high
        return low, high


@dataclass
class RefConfig(BaseConfig):
    """`actor_rollout_ref.ref`: the frozen reference policy (forward passes only)."""

    DERIVED_KEYS: ClassVar[tuple[str, ...]] = ("use_remove_padding", "use_fused_kernels")

    strategy: str = "fsdp"
    fsdp_config: RefFSDPConfig = field(default_factory=RefFSDPConfig)
    use_torch_compile: bool = True
    log_prob_micro_batch_size: int | None = None
    log_prob_micro_batch_size_per_gpu: int | None = None
    log_prob_use_dynamic_bsz: bool = False
    log_prob_max_token_len_per_gpu: int = 16384
    ulysses_sequence_parallel_size: int = 1
    entropy_from_logits_with_chunking: bool = False
    entropy_checkpointing: bool = False
    profiler: ProfilerConfig = field(default_factory=ProfilerConfig)
    use_remove_padding: bool = False
    use_fused_kernels: bool = False
    rollout_n: int = 1
    entropy_from_logits_chunk_size: int = 2048
    pad_to_length: bool = False

    def __post_init__(self) -> None:
        super().__post_init__()
        _unify_engine_keys(self)


# verl's names of the actor node per engine family (the `_target_`s of actor/dp_actor.yaml and megatron_actor.yaml):
# one class here, whose engine block is `fsdp_config` or `megatron` (an extra key) by the family
FSDPActorConfig = ActorConfig
McoreActorConfig = ActorConfig
