"""Typed config sections of the workers (actor, rollout, reference, critic, reward model).

Built once from the composed Hydra config (see `verl.trainer.config.PPOConfig`); workers and engines read
attributes. The YAML in `verl/trainer/config/` is where every default is decided; the dataclass defaults mirror it
and a test keeps them equal.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from verl.utils.config import BaseConfig
from verl.workers.config.actor import ActorConfig, PolicyLossConfig, RefConfig
from verl.workers.config.critic import CriticConfig
from verl.workers.config.engine import CheckpointConfig, CriticOptimConfig, FSDPConfig, OptimConfig, WrapPolicyConfig
from verl.workers.config.model import CriticModelConfig, FusedKernelOptions, HFModelConfig, RewardModelModelConfig
from verl.workers.config.reward_model import OverlongBufferConfig, RewardModelConfig, SandboxFusionConfig
from verl.workers.config.rollout import EngineKwargsConfig, MultiTurnConfig, RolloutConfig, SamplingConfig

__all__ = [
    "ActorConfig",
    "ActorRolloutRefConfig",
    "CheckpointConfig",
    "CriticConfig",
    "CriticModelConfig",
    "CriticOptimConfig",
    "EngineKwargsConfig",
    "FSDPConfig",
    "FusedKernelOptions",
    "HFModelConfig",
    "MultiTurnConfig",
    "OptimConfig",
    "OverlongBufferConfig",
    "PolicyLossConfig",
    "RefConfig",
    "RewardModelConfig",
    "RewardModelModelConfig",
    "RolloutConfig",
    "SamplingConfig",
    "SandboxFusionConfig",
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
