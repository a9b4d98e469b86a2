"""PPO actors: the PPO policy update over a training engine, and verl's data-parallel (FSDP) actor."""

from verl.workers.actor.base import BasePPOActor
from verl.workers.actor.dp_actor import DataParallelPPOActor
from verl.workers.actor.ppo_actor import PPOActor

__all__ = ["BasePPOActor", "DataParallelPPOActor", "PPOActor"]
