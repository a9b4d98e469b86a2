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
    # the process group's collective timeout (seconds) of the policy's workers
    nccl_timeout: int = 600

    def __post_init__(self) -> None:
        super().__post_init__()
        # the reference runs on the actor's sequence-parallel mesh: left alone (both spellings at 1), it follows the
        # actor's size however that was given (verl 0.9's actor.fsdp_config.ulysses_sequence_parallel_size included)
        ref, actor_sp = self.ref, self.actor.ulysses_sequence_parallel_size
        if ref.ulysses_sequence_parallel_size == 1 and ref.fsdp_config.ulysses_sequence_parallel_size == 1:
            ref.ulysses_sequence_parallel_size = ref.fsdp_config.ulysses_sequence_parallel_size = actor_sp
