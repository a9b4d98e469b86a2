"""The typed config of the workers' roles, at verl's import path: one dataclass per YAML node, each named by the
node's `_target_` (actor, ref, rollout, critic, reward model and verl 0.9's reward section, their model, engine,
optimizer and checkpoint blocks), the per-rank batch sizes the workers derive, and `ConfigError`.

The YAML under `verl/trainer/config/` is where defaults are decided; these classes mirror it (a test keeps the two
equal) and add types. The trainer-side sections (data, algorithm, trainer) and the whole `PPOConfig` are in
`verl.trainer.config`, which re-exports these.
"""

from verl.workers.config.actor import ActorConfig, FSDPActorConfig, McoreActorConfig, PolicyLossConfig, RefConfig
from verl.workers.config.actor_rollout_ref import ActorRolloutRefConfig
from verl.workers.config.checkpoint import CheckpointConfig
from verl.workers.config.critic import CriticConfig, FSDPCriticConfig, McoreCriticConfig
from verl.workers.config.distillation import (
    DistillationConfig,
    DistillationLossConfig,
    DistillationTeacherInferenceConfig,
    DistillationTeacherModelConfig,
    DistillationTeacherModelsConfig,
)
from verl.workers.config.engine import (
    FSDPConfig,
    FSDPEngineConfig,
    McoreEngineConfig,
    MegatronConfig,
    QATEngineConfig,
    WrapPolicyConfig,
)
from verl.workers.config.errors import ConfigError
from verl.workers.config.model import (
    CriticModelConfig,
    FusedKernelOptions,
    HFModelConfig,
    MegatronLoraConfig,
    MtpConfig,
    RewardModelModelConfig,
    TiledMlpConfig,
)
from verl.workers.config.optimizer import CriticOptimConfig, FSDPOptimizerConfig, McoreOptimizerConfig, OptimConfig
from verl.workers.config.reward import (
    CustomRewardFunctionConfig,
    ModuleConfig,
    OverlongBufferConfig,
    RewardConfig,
    RewardManagerConfig,
    RewardModelConfig,
    SandboxFusionConfig,
    ServedRewardModelConfig,
    ServedRewardModelRolloutConfig,
)
from verl.workers.config.rollout import (
    AgentLoopConfig,
    CheckpointEngineConfig,
    CustomAsyncServerConfig,
    DisaggregationConfig,
    EngineKwargsConfig,
    MultiTurnConfig,
    PrometheusConfig,
    RolloutConfig,
    SamplingConfig,
    TraceConfig,
)

__all__ = [
    "ActorConfig",
    "ActorRolloutRefConfig",
    "AgentLoopConfig",
    "CheckpointConfig",
    "CheckpointEngineConfig",
    "ConfigError",
    "CriticConfig",
    "CriticModelConfig",
    "CriticOptimConfig",
    "CustomAsyncServerConfig",
    "DisaggregationConfig",
    "DistillationConfig",
    "DistillationLossConfig",
    "DistillationTeacherInferenceConfig",
    "DistillationTeacherModelConfig",
    "DistillationTeacherModelsConfig",
    "CustomRewardFunctionConfig",
    "EngineKwargsConfig",
    "FSDPActorConfig",
    "FSDPConfig",
    "FSDPCriticConfig",
    "FSDPEngineConfig",
    "FSDPOptimizerConfig",
    "FusedKernelOptions",
    "HFModelConfig",
    "McoreActorConfig",
    "McoreCriticConfig",
    "McoreEngineConfig",
    "McoreOptimizerConfig",
    "MegatronConfig",
    "MegatronLoraConfig",
    "MtpConfig",
    "ModuleConfig",
    "MultiTurnConfig",
    "OptimConfig",
    "OverlongBufferConfig",
    "PolicyLossConfig",
    "QATEngineConfig",
    "PrometheusConfig",
    "RefConfig",
    "RewardConfig",
    "RewardManagerConfig",
    "RewardModelConfig",
    "RewardModelModelConfig",
    "RolloutConfig",
    "SamplingConfig",
    "SandboxFusionConfig",
    "TiledMlpConfig",
    "TraceConfig",
    "ServedRewardModelConfig",
    "ServedRewardModelRolloutConfig",
    "WrapPolicyConfig",
]
