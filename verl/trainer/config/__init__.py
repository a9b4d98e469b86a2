"""The config package: the YAML files, the trainer's typed sections, the whole `PPOConfig`, and the checks.

`PPOConfig.from_config(hydra_config)` builds every section of the composed `ppo_trainer` config once; workers and
trainer read attributes. The YAML files next to this module are where defaults are decided; the dataclasses mirror
them (a test keeps the two equal) and add types, so a value of the wrong type fails when the config is built, naming
its key. Keys a recipe's YAML or a `+key=value` override adds are kept as each section's extra keys (see
`verl.utils.config.BaseConfig`).

Modules: the trainer's own sections (`data`, `algorithm`, `trainer`, `sft`), `generated` (the flat reference files
`_generated_<name>.yaml`). The roles' sections (actor, ref, rollout, critic, reward model, their model, engine,
optimizer and checkpoint blocks), the per-rank batch sizes and `ConfigError` live in `verl.workers.config`, verl's
path, and are re-exported here. The driver-side checks, which look at the registries of higher layers, are the
subpackage `checks` (not imported here).
"""

from __future__ import annotations

from dataclasses import dataclass, field

from verl.trainer.config.algorithm import (
    AlgoConfig,
    FilterGroupsConfig,
    KLControlConfig,
    PFPPOConfig,
    RolloutCorrectionConfig,
)
from verl.trainer.config.data import CustomClsConfig, DataConfig
from verl.trainer.config.sft import SFTConfig
from verl.trainer.config.trainer import (
    AsyncTrainingConfig,
    CustomRewardFunctionConfig,
    RayInitConfig,
    RolloutPoolConfig,
    TrainerConfig,
    async_training_config,
)
from verl.utils.config import BaseConfig, omega_conf_to_dataclass
from verl.workers.config.actor import ActorConfig, PolicyLossConfig, RefConfig
from verl.workers.config.actor_rollout_ref import ActorRolloutRefConfig
from verl.workers.config.checkpoint import CheckpointConfig
from verl.workers.config.critic import CriticConfig
from verl.workers.config.engine import FSDPConfig, MegatronConfig, WrapPolicyConfig
from verl.workers.config.errors import ConfigError
from verl.workers.config.model import CriticModelConfig, FusedKernelOptions, HFModelConfig, RewardModelModelConfig
from verl.workers.config.optimizer import CriticOptimConfig, OptimConfig
from verl.workers.config.reward import (
    ModuleConfig,
    OverlongBufferConfig,
    RewardConfig,
    RewardManagerConfig,
    RewardModelConfig,
    SandboxFusionAliasConfig,
    SandboxFusionConfig,
    ServedRewardModelConfig,
    ServedRewardModelRolloutConfig,
)
from verl.workers.config.rollout import (
    AgentLoopConfig,
    CheckpointEngineConfig,
    EngineKwargsConfig,
    MultiTurnConfig,
    RolloutConfig,
    SamplingConfig,
)

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
    "ModuleConfig",
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
    "RewardConfig",
    "RewardManagerConfig",
    "RewardModelConfig",
    "RewardModelModelConfig",
    "RolloutConfig",
    "RolloutCorrectionConfig",
    "SFTConfig",
    "SamplingConfig",
    "SandboxFusionConfig",
    "ServedRewardModelConfig",
    "ServedRewardModelRolloutConfig",
    "TrainerConfig",
    "WrapPolicyConfig",
]


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
    # verl 0.9's legacy top-level sandbox block (aliases of reward_model.sandbox_fusion)
    sandbox_fusion: SandboxFusionAliasConfig = field(default_factory=SandboxFusionAliasConfig)
    # verl 0.9's reward section: other spellings of the reward keys, resolved into the sections above when built
    reward: RewardConfig = field(default_factory=RewardConfig)
    algorithm: AlgoConfig = field(default_factory=AlgoConfig)
    trainer: TrainerConfig = field(default_factory=TrainerConfig)
    rollout: RolloutPoolConfig = field(default_factory=RolloutPoolConfig)  # a standalone rollout's pool
    ray_init: RayInitConfig = field(default_factory=RayInitConfig)

    @classmethod
    def from_config(cls, config) -> PPOConfig:
        """``config`` (a composed DictConfig, a mapping, or already a PPOConfig) as a PPOConfig, with the reward's
        other spellings (verl 0.9's ``reward.*``, verl 0.7's and 0.6's legacy keys) resolved into the keys the
        runtime reads (`verl.trainer.config.reward_spellings`); ConfigError where two spellings disagree."""
        if isinstance(config, cls):
            return config
        from verl.trainer.config.reward_spellings import resolve_reward_spellings

        typed = omega_conf_to_dataclass(config, cls, allow_extra=True)
        resolve_reward_spellings(typed)
        return typed
