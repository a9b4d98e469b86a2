"""`actor_rollout_ref.actor` and `.ref`: the trained policy and its frozen reference."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import ClassVar

from verl.utils.config import BaseConfig
from verl.utils.debug import ProfilerConfig
from verl.workers.config.checkpoint import CheckpointConfig
from verl.workers.config.engine import FSDPConfig
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
    tau_pos: float = 1.0
    tau_neg: float = 1.05


@dataclass
class ActorConfig(BaseConfig):
    """`actor_rollout_ref.actor`. The worker rewrites the batch sizes to per-rank values at start-up."""

    # not settings: the worker copies them from actor_rollout_ref.model (verl's behaviour); the check refuses them
    DERIVED_KEYS: ClassVar[tuple[str, ...]] = ("use_remove_padding", "use_fused_kernels")

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
    use_remove_padding: bool = False
    use_fused_kernels: bool = False

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
    fsdp_config: FSDPConfig = field(default_factory=FSDPConfig)
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


# verl's names of the actor node per engine family (the `_target_`s of actor/dp_actor.yaml and megatron_actor.yaml):
# one class here, whose engine block is `fsdp_config` or `megatron` (an extra key) by the family
FSDPActorConfig = ActorConfig
McoreActorConfig = ActorConfig
