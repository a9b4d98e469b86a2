"""The reward-model interface: score a batch of finished responses."""

from abc import ABC, abstractmethod

from verl.protocol import DataProto

__all__ = ["BasePPORewardModel"]


class BasePPORewardModel(ABC):
    """A reward-model engine. ``config`` is the ``reward_model`` config section."""

    def __init__(self, config):
        self.config = config

    @abstractmethod
    def compute_reward(self, data: DataProto) -> DataProto:
        """Score each response of ``data``; returns a DataProto whose batch holds ``rm_scores``
        ``(bs, response_length)``, the score on each response's last valid token and zero elsewhere."""
