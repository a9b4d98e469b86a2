"""Reward-model engines (verl's ``verl.workers.reward_model``)."""

from verl.workers.reward_model.base import BasePPORewardModel

__all__ = ["BasePPORewardModel"]
