"""One multi-turn trajectory: its conversation, its token ids with the loss mask, and what its tools reported."""

from __future__ import annotations

import uuid
from dataclasses import dataclass, field
from typing import Any

__all__ = ["Trajectory"]


@dataclass
class Trajectory:
    """A prompt's sample growing turn by turn.

    ``prompt_ids`` is the templated first prompt (with the tool schemas); ``response_ids`` everything after it, with
    ``loss_mask`` 1 on tokens the model generated and 0 on template, tool and user tokens; ``log_probs`` holds the
    engine's log-prob of each generated token (``None`` elsewhere or when the engine gives none).
    """

    row: int
    messages: list[dict[str, Any]]
    tool_schemas: list[dict]
    tools_kwargs: dict[str, dict]
    interaction_kwargs: dict[str, Any]
    prompt_ids: list[int]
    response_budget: int
    request_id: str = field(default_factory=lambda: str(uuid.uuid4()))
    response_ids: list[int] = field(default_factory=list)
    loss_mask: list[int] = field(default_factory=list)
    log_probs: list[float | None] = field(default_factory=list)
    # partial rollout: the weight version that sampled each response id (-1 on ids the model did not generate)
    versions: list[int] = field(default_factory=list)
    assistant_turns: int = 0
    user_turns: int = 0
    tool_calls: int = 0
    turn_scores: list[float] = field(default_factory=list)
    tool_rewards: dict[str, float] = field(default_factory=dict)
    done: bool = False
    stop_reason: str = ""

    @property
    def remaining(self) -> int:
        """Response tokens still allowed."""
        return self.response_budget - len(self.response_ids)

    @property
    def generation_prompt(self) -> list[int]:
        """What the engine continues from: the whole conversation so far."""
        return self.prompt_ids + self.response_ids

    def add_generated(self, ids: list[int], log_probs: list[float] | None, versions: list[int] | None = None) -> None:
        """Append the model's tokens (trained on), cut to the budget; ``versions``: the weight version of each."""
        ids = ids[: self.remaining]
        self.response_ids += ids
        self.loss_mask += [1] * len(ids)
        self.log_probs += list(log_probs[: len(ids)]) if log_probs is not None else [None] * len(ids)
        self.versions += list(versions[: len(ids)]) if versions is not None else [-1] * len(ids)

    def add_context(self, ids: list[int]) -> bool:
        """Append template, tool or user tokens (not trained on); False when they did not all fit."""
        fits = len(ids) <= self.remaining
        ids = ids[: self.remaining]
        self.response_ids += ids
        self.loss_mask += [0] * len(ids)
        self.log_probs += [None] * len(ids)
        self.versions += [-1] * len(ids)
        return fits

    def finish(self, reason: str) -> None:
        """Stop this trajectory (``length``, ``stop``, ``max_turns``, ``interaction``)."""
        self.done, self.stop_reason = True, reason

    def reward_scores(self) -> dict[str, Any]:
        """Tool rewards by tool name and the interaction's per-turn scores, for the reward function."""
        return {**self.tool_rewards, "user_turn_rewards": list(self.turn_scores)}
