"""The interaction interface: a simulated user or environment that answers the model between assistant turns.

Like tools, one interaction object serves every trajectory of a batch; per-trajectory state lives under an instance
id, and every method is a coroutine.
"""

from __future__ import annotations

import uuid
from typing import Any


class BaseInteraction:
    """Base class of interactions loaded from ``multi_turn.interaction_config_path``."""

    def __init__(self, config: dict):
        self.config = dict(config or {})
        self.name: str = self.config.get("name", "interaction_agent")

    async def start_interaction(self, instance_id: str | None = None, **kwargs) -> str:
        """Start a conversation's state; returns its id (a new uuid4 string when none is given)."""
        return instance_id if instance_id is not None else str(uuid.uuid4())

    async def generate_response(
        self, instance_id: str, messages: list[dict[str, Any]], **kwargs
    ) -> tuple[bool, str, float, dict]:
        """Answer the conversation so far: ``(should_terminate_sequence, response_content, turn_score, extra)``."""
        return False, "Your current result seems acceptable.", 0.8, {}

    async def calculate_score(self, *args, **kwargs) -> float:
        """The interaction's score of the conversation."""
        return 0.0

    async def finalize_interaction(self, *args, **kwargs) -> None:
        """Drop the conversation's state."""
