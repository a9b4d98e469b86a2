"""The config package: the YAML files, the typed sections of every role, batch-size normalization and the checks.

`PPOConfig.from_config(hydra_config)` builds every section of the composed `ppo_trainer` config once; workers and
trainer read attributes. The YAML files next to this module are where defaults are decided; the dataclasses mirror
them (a test keeps the two equal) and add types, so a value of the wrong type fails when the config is built, naming
its key. Keys a recipe's YAML or a `+key=value` override adds are kept as each section's extra keys (see
`verl.utils.config.BaseConfig`).

Modules: one per section (`data`, `algorithm`, `trainer`, `actor` (actor and ref), `rollout`, `critic`,
`reward_model`, `model` (the `model` block of each role), `engine` (FSDP, optimizer, checkpoint blocks), `sft`),
`batch_sizes` (per-rank sizes the workers derive from the global ones), `errors` (`ConfigError`). The driver-side
checks, which look at the registries of higher layers, are the subpackage `checks` (not imported here).
"""

from __future__ import annotations

from dataclasses import dataclass, field

from verl.trainer.config.actor import ActorConfig, PolicyLossConfig, RefConfig
from verl.trainer.config.algorithm import (
    AlgoConfig,
    FilterGroupsConfig,
    KLControlConfig,
    PFPPOConfig,
    RolloutCorrectionConfig,
)
from verl.trainer.config.critic import CriticConfig
from verl.trainer.config.data import CustomClsConfig, DataConfig
from verl.trainer.config.engine import (
    CheckpointConfig,
    CriticOptimConfig,
    FSDPConfig,
    MegatronConfig,
    OptimConfig,
    WrapPolicyConfig,
)
from verl.trainer.config.errors import ConfigError
from verl.trainer.config.model import CriticModelConfig, FusedKernelOptions, HFModelConfig, RewardModelModelConfig
from verl.trainer.config.reward_model import OverlongBufferConfig, RewardModelConfig, SandboxFusionConfig
from verl.trainer.config.rollout import (
    AgentLoopConfig,
    CheckpointEngineConfig,
    EngineKwargsConfig,
    MultiTurnConfig,
    RolloutConfig,
    SamplingConfig,
)
from verl.trainer.config.sft import SFTConfig
from verl.trainer.config.trainer import (
    AsyncTrainingConfig,
    CustomRewardFunctionConfig,
    RayInitConfig,
    RolloutPoolConfig,
    TrainerConfig,
    async_training_config,
)
from verl.utils.config import BaseConfig

__all__ = [
    "ActorConfig",
    "ActorRolloutRefConfig",
    "AgentLoopConfig",
    "AlgoConfig",
    "BaseConfig",
    "CheckpointConfig",
    "ConfigError",
    "CriticConfig",
    "CriticModelConfig",
    "CriticOptimConfig",
    "CustomClsConfig",
    "CustomRewardFunctionConfig",
    "DataConfig",
    "CheckpointEngineConfig",
    "EngineKwargsConfig",
    "FSDPConfig",
    "MegatronConfig",
    "FilterGroupsConfig",
    "FusedKernelOptions",
    "HFModelConfig",
    "KLControlConfig",
    "MultiTurnConfig",
    "OptimConfig",
    "OverlongBufferConfig",
    "PFPPOConfig",
    "PPOConfig",
    "PolicyLossConfig",
    "RayInitConfig",
    "RolloutPoolConfig",
    "AsyncTrainingConfig",
    "async_training_config",
    "RefConfig",
    "RewardModelConfig",
    "RewardModelModelConfig",
    "RolloutConfig",
    "RolloutCorrectionConfig",
    "SFTConfig",
    "SamplingConfig",
    "SandboxFusionConfig",
    "TrainerConfig",
    "WrapPolicyConfig",
]


@dataclass
class ActorRolloutRefConfig(BaseConfig):
    """`actor_rollout_ref`: the policy's model, its training (actor), sampling (rollout) and reference (ref)."""

    hybrid_engine: bool = True
    model: HFModelConfig = field(default_factory=HFModelConfig)
    actor: ActorConfig = field(default_factory=ActorConfig)
    ref: RefConfig = field(default_factory=RefConfig)
    rollout: RolloutConfig = field(default_factory=RolloutConfig)


@dataclass
class PPOConfig(BaseConfig):
    """The whole `ppo_trainer` config."""

    # the engine family whose files the defaults list composed (model_engine/dp.yaml or megatron.yaml)
    model_engine: str = "dp"
    data: DataConfig = field(default_factory=DataConfig)
    actor_rollout_ref: ActorRolloutRefConfig = field(default_factory=ActorRolloutRefConfig)
    critic: CriticConfig = field(default_factory=CriticConfig)
    reward_model: RewardModelConfig = field(default_factory=RewardModelConfig)
    custom_reward_function: CustomRewardFunctionConfig = field(default_factory=CustomRewardFunctionConfig)
    algorithm: AlgoConfig = field(default_factory=AlgoConfig)
    trainer: TrainerConfig = field(default_factory=TrainerConfig)
    rollout: RolloutPoolConfig = field(default_factory=RolloutPoolConfig)  # a standalone rollout's pool
    ray_init: RayInitConfig = field(default_factory=RayInitConfig)
