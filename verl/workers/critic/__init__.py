"""PPO critics: the value update over a training engine, and verl's data-parallel (FSDP) critic."""

from verl.workers.critic.base import BasePPOCritic
from verl.workers.critic.dp_critic import DataParallelPPOCritic
from verl.workers.critic.ppo_critic import PPOCritic

__all__ = ["BasePPOCritic", "DataParallelPPOCritic", "PPOCritic"]
