"""`actor_rollout_ref`: the policy's model with its training (actor), sampling (rollout) and reference (ref) sides,
which share one worker group in the hybrid engine."""

from __future__ import annotations

from dataclasses import dataclass, field

from verl.utils.config import BaseConfig
from verl.workers.config.actor import ActorConfig, RefConfig
from verl.workers.config.model import HFModelConfig
from verl.workers.config.rollout import RolloutConfig

__all__ = ["ActorRolloutRefConfig"]


@dataclass
class ActorRolloutRefConfig(BaseConfig):
    """`actor_rollout_ref`: the policy's model, its training (actor), sampling (rollout) and reference (ref)."""

    hybrid_engine: bool = True
    model: HFModelConfig = field(default_factory=HFModelConfig)
    actor: ActorConfig = field(default_factory=ActorConfig)
    ref: RefConfig = field(default_factory=RefConfig)
    rollout: RolloutConfig = field(default_factory=RolloutConfig)
