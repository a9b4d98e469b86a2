"""verl's import path of the Megatron workers (``verl.workers.megatron_workers``): the same backend-free role workers
as :mod:`verl.workers.fsdp_workers`; ``strategy=megatron`` makes them build the engine of
:mod:`verl.workers.engine.megatron`."""

from verl.workers.roles.actor_rollout_ref import ActorRolloutRefWorker, AsyncActorRolloutRefWorker
from verl.workers.roles.critic import CriticWorker
from verl.workers.roles.reward_model import RewardModelWorker

__all__ = ["ActorRolloutRefWorker", "AsyncActorRolloutRefWorker", "CriticWorker", "RewardModelWorker"]
