"""verl's import path ``verl.workers.rollout.schemas``: the multi-turn request schemas, which live in
``verl.multi_turn.request_schemas`` (``AsyncRolloutRequest`` is a record of one of our trajectories)."""

from verl.multi_turn.request_schemas import (
    AsyncRolloutRequest,
    AsyncRolloutRequestStateEnum,
    FinishReasonTypeEnum,
    Message,
)

__all__ = ["AsyncRolloutRequest", "AsyncRolloutRequestStateEnum", "FinishReasonTypeEnum", "Message"]
