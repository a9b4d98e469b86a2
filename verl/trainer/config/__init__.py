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

import verl.workers.config as _workers_config
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
    HybridRolloutSwitchConfig,
    RayInitConfig,
    RayKwargsConfig,
    RolloutPoolConfig,
    TrainerConfig,
    TransferQueueConfig,
    async_training_config,
)
from verl.utils.config import BaseConfig, omega_conf_to_dataclass
from verl.utils.debug.profile import GlobalProfilerConfig
from verl.utils.skip import SkipManagerConfig
from verl.workers.config import *  # noqa: F403  (the roles' sections at verl's path, re-exported here)
from verl.workers.config import ActorRolloutRefConfig, ConfigError, CriticConfig, DistillationConfig, RewardModelConfig
from verl.workers.config.reward import RewardConfig, SandboxFusionAliasConfig

__all__ = [
    "AlgoConfig",
    "AsyncTrainingConfig",
    "BaseConfig",
    "CustomClsConfig",
    "CustomRewardFunctionConfig",
    "DataConfig",
    "FilterGroupsConfig",
    "KLControlConfig",
    "PFPPOConfig",
    "PPOConfig",
    "RayInitConfig",
    "RolloutCorrectionConfig",
    "RolloutPoolConfig",
    "SFTConfig",
    "TrainerConfig",
    "async_training_config",
    "GlobalProfilerConfig",
    "HybridRolloutSwitchConfig",
    "RayKwargsConfig",
    "SkipManagerConfig",
    "TransferQueueConfig",
    *_workers_config.__all__,
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
    # verl 0.9's sections: ray.init's arguments under their new name, the trainer-wide profiler keys, and the
    # features kept at their defaults (rollout skipping, TransferQueue)
    ray_kwargs: RayKwargsConfig = field(default_factory=RayKwargsConfig)
    global_profiler: GlobalProfilerConfig = field(default_factory=GlobalProfilerConfig)
    skip: SkipManagerConfig = field(default_factory=SkipManagerConfig)
    transfer_queue: TransferQueueConfig = field(default_factory=TransferQueueConfig)
    distillation: DistillationConfig = field(default_factory=DistillationConfig)

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

    def __post_init__(self) -> None:
        super().__post_init__()
        self._name_the_standalone_rollout_pool()

    def _name_the_standalone_rollout_pool(self) -> None:
        """verl 0.9 names a standalone rollout's pool at ``actor_rollout_ref.rollout.nnodes`` / ``n_gpus_per_node``;
        verl's one-step-off recipe (and this project before) at the top-level ``rollout`` block, which every reader of
        the pool uses. ``actor_rollout_ref.rollout.nnodes > 0`` copies the former into the latter; a top-level
        block set to something else as well is a conflict."""
        arr_rollout = self.actor_rollout_ref.rollout
        if arr_rollout.nnodes <= 0:
            return
        pool, default = self.rollout, RolloutPoolConfig()
        wanted = (arr_rollout.nnodes, arr_rollout.n_gpus_per_node)
        given = (pool.nnodes, pool.n_gpus_per_node)
        if given != wanted and given != (default.nnodes, default.n_gpus_per_node):
            raise ConfigError(
                f"actor_rollout_ref.rollout.nnodes={wanted[0]} and n_gpus_per_node={wanted[1]} name the standalone "
                f"rollout's pool, and so do rollout.nnodes={given[0]} and rollout.n_gpus_per_node={given[1]}; set one "
                "of the two places (leave the other at its defaults)"
            )
        pool.nnodes, pool.n_gpus_per_node = wanted
