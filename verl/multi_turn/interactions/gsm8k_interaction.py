"""A GSM8K teacher: after each assistant turn it says whether the answer is right, and ends the talk once it is.

Configure it with ``examples/multiturn/config/interaction_config/gsm8k_interaction_config.yaml`` and rows made by
``examples/data_preprocess/gsm8k_multiturn_w_interaction.py``, whose ``interaction_kwargs`` carry the
``ground_truth`` into ``start_interaction``.
"""

from __future__ import annotations

from typing import Any

from verl.multi_turn.interactions.base import BaseInteraction
from verl.multi_turn.tools.gsm8k_tool import Gsm8kAnswerStore

CORRECT_RESPONSE = "Your response is correct!"
INCORRECT_RESPONSE = "Your response is incorrect! You need to reflect on your answer and try again."


class Gsm8kInteraction(BaseInteraction, Gsm8kAnswerStore):
    """Scores the latest ``user`` message of the conversation against the GSM8K ground truth."""

    def __init__(self, config: dict):
        super().__init__(config)
        self._instance_dict: dict[str, dict[str, Any]] = {}

    async def start_interaction(self, instance_id: str | None = None, ground_truth: str | None = None, **kwargs) -> str:
        """Start a conversation's state with its ``ground_truth``; returns its id (a new uuid4 string if None)."""
        return self._start(instance_id, ground_truth)

    async def generate_response(
        self, instance_id: str, messages: list[dict[str, Any]], **kwargs
    ) -> tuple[bool, str, float, dict]:
        """Score the last ``user`` message: ``(True, correct text, 1.0, {})`` or ``(False, retry text, score, {})``."""
        # verl reads the last message with role "user" (not "assistant"); kept so scores match verl's runs.
        content = next((m.get("content") or "" for m in reversed(messages) if m.get("role") == "user"), "")
        self._record(instance_id, content)
        reward = await self.calculate_score(instance_id)
        if reward == 1.0:
            return True, CORRECT_RESPONSE, 1.0, {}
        return False, INCORRECT_RESPONSE, reward, {}

    async def calculate_score(self, instance_id: str, **kwargs) -> float:
        """1.0 if the last number of the stored response equals the ground truth, else 0.0."""
        return self._score(instance_id)

    async def finalize_interaction(self, instance_id: str, **kwargs) -> None:
        """Drop the conversation's state (KeyError if the id is unknown)."""
        self._drop(instance_id)
