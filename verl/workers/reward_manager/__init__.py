"""Reward managers: turn a batch of responses into token-level outcome rewards (registered by name)."""

from verl.workers.reward_manager.batch import BatchRewardManager
from verl.workers.reward_manager.dapo import DAPORewardManager
from verl.workers.reward_manager.hybrid import HybridRewardManager, RewardSource
from verl.workers.reward_manager.naive import NaiveRewardManager
from verl.workers.reward_manager.prime import PrimeRewardManager
from verl.workers.reward_manager.rate_limited import RateLimitedRewardManager
from verl.workers.reward_manager.registry import REWARD_MANAGER_REGISTRY, get_reward_manager_cls, register
from verl.workers.reward_manager.remote import RemoteRewardManager

__all__ = [
    "BatchRewardManager",
    "DAPORewardManager",
    "HybridRewardManager",
    "NaiveRewardManager",
    "PrimeRewardManager",
    "REWARD_MANAGER_REGISTRY",
    "RateLimitedRewardManager",
    "RemoteRewardManager",
    "RewardSource",
    "get_reward_manager_cls",
    "register",
]
