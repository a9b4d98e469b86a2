"""The PPO actor interface: recompute log-probs of a batch and update the policy on it."""

from abc import ABC, abstractmethod

from verl.protocol import DataProto

__all__ = ["BasePPOActor"]


class BasePPOActor(ABC):
    """An actor (policy) engine. ``config`` is the ``actor_rollout_ref.actor`` (or ``.ref``) config section."""

    def __init__(self, config):
        self.config = config

    @abstractmethod
    def compute_log_prob(self, data: DataProto):
        """Log-probs of ``responses`` given the full sequences: ``(bs, response_length)``."""

    @abstractmethod
    def update_policy(self, data: DataProto) -> dict:
        """Run the PPO update on ``data``; returns metrics (lists of floats per key)."""
