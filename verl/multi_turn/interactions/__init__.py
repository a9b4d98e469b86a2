"""Interactions: a user simulator or environment answering the model in multi-turn rollouts."""

from verl.multi_turn.interactions.base import BaseInteraction

__all__ = ["BaseInteraction"]
