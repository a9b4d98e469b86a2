"""`critic`: the value model of PPO with GAE."""

from __future__ import annotations

from dataclasses import dataclass, field

from verl.utils.config import BaseConfig
from verl.utils.debug import ProfilerConfig
from verl.workers.config.aliases import unify, unify_blocks
from verl.workers.config.checkpoint import CheckpointConfig
from verl.workers.config.engine import FSDPConfig
from verl.workers.config.model import CriticModelConfig
from verl.workers.config.optimizer import CriticOptimConfig

__all__ = ["CriticConfig", "FSDPCriticConfig", "McoreCriticConfig", "critic_enabled"]


@dataclass
class CriticConfig(BaseConfig):
    """`critic`. The worker rewrites the batch sizes to per-rank values at start-up.

    `fsdp` is the value model's FSDP block (verl 0.9); verl v0.4's `model.fsdp_config` is its older spelling, unified
    with it key by key when built (`aliases.unify`), as `grad_clip` is with `optim.clip_grad` and
    `ulysses_sequence_parallel_size` with `fsdp.ulysses_sequence_parallel_size`. `enable`: null runs the critic when
    the estimator is gae (see `critic_enabled`).
    """

    rollout_n: int = 1
    strategy: str = "fsdp"
    optim: CriticOptimConfig = field(default_factory=CriticOptimConfig)
    model: CriticModelConfig = field(default_factory=CriticModelConfig)
    ppo_mini_batch_size: int = 256
    ppo_micro_batch_size: int | None = None
    ppo_micro_batch_size_per_gpu: int | None = None
    forward_micro_batch_size: int | None = None
    forward_micro_batch_size_per_gpu: int | None = None
    use_dynamic_bsz: bool = False
    ppo_max_token_len_per_gpu: int = 32768
    forward_max_token_len_per_gpu: int = 32768
    ulysses_sequence_parallel_size: int = 1
    ppo_epochs: int = 1
    shuffle: bool = False
    grad_clip: float = 1.0
    cliprange_value: float = 0.5
    loss_agg_mode: str = "token-mean"
    checkpoint: CheckpointConfig = field(default_factory=CheckpointConfig)
    profiler: ProfilerConfig = field(default_factory=ProfilerConfig)
    enable: bool | None = None
    data_loader_seed: int = 42
    loss_scale_factor: int | None = None
    fsdp: FSDPConfig = field(default_factory=FSDPConfig)

    def __post_init__(self) -> None:
        super().__post_init__()
        unify(self, "optim.clip_grad", "grad_clip")
        if isinstance(getattr(self.model, "fsdp_config", None), FSDPConfig):
            unify_blocks(self, "fsdp", "model.fsdp_config")
        unify(self, "fsdp.ulysses_sequence_parallel_size", "ulysses_sequence_parallel_size")


def critic_enabled(critic: CriticConfig, adv_estimator: str | None) -> bool:
    """Whether the PPO trainer runs the critic: ``critic.enable`` when given, else for the gae estimator only."""
    if critic.enable is not None:
        return bool(critic.enable)
    return adv_estimator == "gae"


# verl's names of the critic node per engine family (the `_target_`s of critic/dp_critic.yaml and megatron_critic.yaml)
FSDPCriticConfig = CriticConfig
McoreCriticConfig = CriticConfig
