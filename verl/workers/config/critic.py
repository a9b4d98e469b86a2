"""`critic`: the value model of PPO with GAE."""

from __future__ import annotations

from dataclasses import dataclass, field

from verl.utils.config import BaseConfig
from verl.utils.debug import ProfilerConfig
from verl.workers.config.checkpoint import CheckpointConfig
from verl.workers.config.model import CriticModelConfig
from verl.workers.config.optimizer import CriticOptimConfig

__all__ = ["CriticConfig", "FSDPCriticConfig", "McoreCriticConfig"]


@dataclass
class CriticConfig(BaseConfig):
    """`critic`. The worker rewrites the batch sizes to per-rank values at start-up."""

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


# verl's names of the critic node per engine family (the `_target_`s of critic/dp_critic.yaml and megatron_critic.yaml)
FSDPCriticConfig = CriticConfig
McoreCriticConfig = CriticConfig
