"""verl's schemas of a multi-turn rollout request, over our trajectories.

verl 0.4's SGLang rollout plays each multi-turn sample as an ``AsyncRolloutRequest`` that moves through
``AsyncRolloutRequestStateEnum`` states. Here the tool agent loop (``verl.multi_turn.agent_loop.tool_agent``) plays a
``Trajectory``; these models give the same facts in verl's shape: ``AsyncRolloutRequest.from_trajectory`` records one
trajectory (messages, token ids, loss mask, rewards), ``Message`` is one chat message and ``FinishReasonTypeEnum`` why
an engine ended a turn. verl's import path for them is ``verl.workers.rollout.schemas``.
"""

from __future__ import annotations

from enum import Enum
from typing import Any

from pydantic import BaseModel, Field

from verl.multi_turn.tools.schemas import OpenAIFunctionToolCall, OpenAIFunctionToolSchema
from verl.multi_turn.trajectory import Trajectory

__all__ = ["AsyncRolloutRequest", "AsyncRolloutRequestStateEnum", "FinishReasonTypeEnum", "Message"]


class FinishReasonTypeEnum(str, Enum):
    """Why the engine ended an assistant turn (the OpenAI ``finish_reason`` values)."""

    LENGTH = "length"
    STOP = "stop"
    TOOL_CALL = "tool_calls"

    @classmethod
    def from_str(cls, value: str) -> FinishReasonTypeEnum:
        """The member for an engine's finish reason (``"stop"``, ``"length"``, ``"tool_calls"``); ValueError else."""
        try:
            return cls(value)
        except ValueError:
            raise ValueError(f"unknown finish reason {value!r}; expected one of {[m.value for m in cls]}") from None


class AsyncRolloutRequestStateEnum(str, Enum):
    """Where a request is in its multi-turn life: created, generating, waiting on tools or on the interaction,
    finished or failed."""

    PENDING = "pending"
    RUNNING = "running"
    COMPLETED = "completed"
    FAILED = "failed"
    TOOL_CALLING = "tool_calling"
    INTERACTING = "interacting"


class Message(BaseModel):
    """One chat message: ``role``, its ``content`` (text, or typed parts) and the assistant's ``tool_calls``."""

    role: str
    content: str | dict[str, Any] | list[dict[str, Any]]
    tool_calls: list[OpenAIFunctionToolCall] | None = None


class AsyncRolloutRequest(BaseModel):
    """One multi-turn sample as verl names its parts: a record of a ``Trajectory`` (``from_trajectory``).

    ``input_ids`` = ``prompt_ids + response_ids``; ``loss_mask`` is 0 on the prompt and, in the response, 1 only on
    ids the model generated (``response_loss_mask``). ``reward_scores`` maps tool names to their rewards plus
    ``user_turn_rewards`` (the interaction's per-turn scores). ``stop_reason`` is why the trajectory ended here
    (``length``, ``stop``, ``max_turns``, ``interaction``; empty while it runs). It is a record: the agent loop, not
    this model, advances a trajectory.
    """

    request_id: str
    state: AsyncRolloutRequestStateEnum
    messages: list[Message]
    tool_schemas: list[OpenAIFunctionToolSchema] | None = None
    tools_kwargs: dict[str, Any] = Field(default_factory=dict)
    interaction_kwargs: dict[str, Any] = Field(default_factory=dict)
    input_ids: list[int]
    prompt_ids: list[int]
    response_ids: list[int]
    loss_mask: list[int]
    prompt_loss_mask: list[int]
    response_loss_mask: list[int]
    reward_scores: dict[str, Any] = Field(default_factory=dict)
    max_response_len: int
    stop_reason: str = ""

    @classmethod
    def from_trajectory(cls, t: Trajectory) -> AsyncRolloutRequest:
        """The request record of trajectory ``t`` as it stands (finished or not)."""
        if t.done:
            state = AsyncRolloutRequestStateEnum.COMPLETED
        elif t.assistant_turns == 0:
            state = AsyncRolloutRequestStateEnum.PENDING
        else:
            state = AsyncRolloutRequestStateEnum.RUNNING
        prompt_mask = [0] * len(t.prompt_ids)
        return cls(
            request_id=t.request_id,
            state=state,
            messages=[Message.model_validate(m) for m in t.messages],
            tool_schemas=[OpenAIFunctionToolSchema.model_validate(s) for s in t.tool_schemas] or None,
            tools_kwargs=t.tools_kwargs,
            interaction_kwargs=t.interaction_kwargs,
            input_ids=t.prompt_ids + t.response_ids,
            prompt_ids=list(t.prompt_ids),
            response_ids=list(t.response_ids),
            loss_mask=prompt_mask + t.loss_mask,
            prompt_loss_mask=prompt_mask,
            response_loss_mask=list(t.loss_mask),
            reward_scores=t.reward_scores(),
            max_response_len=t.response_budget,
            stop_reason=t.stop_reason,
        )
