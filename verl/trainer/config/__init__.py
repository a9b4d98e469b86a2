"""Typed PPO config: `PPOConfig.from_config(hydra_config)` builds every section once.

The YAML files next to this module are where defaults are decided; the dataclasses mirror them (a test keeps the
two equal) and add types, so a value of the wrong type fails when the config is built, naming its key. Keys a
recipe's YAML or a `+key=value` override adds are kept as each section's extra keys (see
`verl.utils.config.BaseConfig`).
"""

from __future__ import annotations

from dataclasses import dataclass, field

from verl.trainer.config.algorithm import AlgoConfig, FilterGroupsConfig, KLControlConfig, PFPPOConfig
from verl.trainer.config.data import CustomClsConfig, DataConfig
from verl.trainer.config.errors import ConfigError
from verl.trainer.config.sft import SFTConfig
from verl.trainer.config.trainer import CustomRewardFunctionConfig, RayInitConfig, TrainerConfig
from verl.utils.config import BaseConfig
from verl.workers.config import ActorRolloutRefConfig, CriticConfig, RewardModelConfig

__all__ = [
    "AlgoConfig",
    "ConfigError",
    "CustomClsConfig",
    "CustomRewardFunctionConfig",
    "DataConfig",
    "FilterGroupsConfig",
    "KLControlConfig",
    "PFPPOConfig",
    "PPOConfig",
    "RayInitConfig",
    "SFTConfig",
    "TrainerConfig",
]


@dataclass
class PPOConfig(BaseConfig):
    """The whole `ppo_trainer` config."""

    data: DataConfig = field(default_factory=DataConfig)
    actor_rollout_ref: ActorRolloutRefConfig = field(default_factory=ActorRolloutRefConfig)
    critic: CriticConfig = field(default_factory=CriticConfig)
    reward_model: RewardModelConfig = field(default_factory=RewardModelConfig)
    custom_reward_function: CustomRewardFunctionConfig = field(default_factory=CustomRewardFunctionConfig)
    algorithm: AlgoConfig = field(default_factory=AlgoConfig)
    trainer: TrainerConfig = field(default_factory=TrainerConfig)
    ray_init: RayInitConfig = field(default_factory=RayInitConfig)
