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
        # the reference runs on the actor's sequence-parallel mesh and its size interpolates the actor's top-level
        # key; when verl 0.9's actor.fsdp_config.ulysses_sequence_parallel_size gave the actor's instead, a reference
        # left alone (both its spellings at 1) follows that too
        ref, actor = self.ref, self.actor
        left_alone = ref.ulysses_sequence_parallel_size == 1 == ref.fsdp_config.ulysses_sequence_parallel_size
        if left_alone and actor.__dict__.get("_sp_from_engine_block"):
            ref.ulysses_sequence_parallel_size = actor.ulysses_sequence_parallel_size
            ref.fsdp_config.ulysses_sequence_parallel_size = actor.ulysses_sequence_parallel_size
