"""The PPO critic interface: predict per-token values and regress them onto returns."""

from abc import ABC, abstractmethod

import torch

from verl.protocol import DataProto

__all__ = ["BasePPOCritic"]


class BasePPOCritic(ABC):
    """A value-function engine. ``config`` is the ``critic`` config section."""

    def __init__(self, config):
        self.config = config

    @abstractmethod
    def compute_values(self, data: DataProto) -> torch.Tensor:
        """Values of the states before each response token: ``(bs, response_length)``."""

    @abstractmethod
    def update_critic(self, data: DataProto) -> dict:
        """Run the value update on ``data``; returns metrics (lists of floats per key)."""
