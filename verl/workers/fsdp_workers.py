"""verl's import path of the FSDP workers (``verl.workers.fsdp_workers``): the role workers are backend-free and live
in :mod:`verl.workers.roles`; the FSDP engine they pick for ``strategy`` fsdp / fsdp2 is in
:mod:`verl.workers.engine.fsdp`."""

from verl.utils.device import get_device_name
from verl.utils.fsdp_utils import get_sharding_strategy
from verl.workers.engine.fsdp.offload import OffloadGuard
from verl.workers.engine.fsdp.setup import create_device_mesh
from verl.workers.roles.actor_rollout_ref import ActorRolloutRefWorker, AsyncActorRolloutRefWorker
from verl.workers.roles.critic import CriticWorker
from verl.workers.roles.reward_model import RewardModelWorker

device_name = get_device_name()

__all__ = [
    "ActorRolloutRefWorker",
    "AsyncActorRolloutRefWorker",
    "CriticWorker",
    "OffloadGuard",
    "RewardModelWorker",
    "create_device_mesh",
    "get_sharding_strategy",
]
