"""The GSM8K answer checker as a tool: the model submits its answer mid-trajectory and learns whether it is right.

Configure it with ``examples/multiturn/config/tool_config/gsm8k_tool_config.yaml`` and rows made by
``examples/data_preprocess/gsm8k_multiturn_w_tool.py``, whose ``tools_kwargs`` give each trajectory its
``ground_truth`` through ``create``.
"""

from __future__ import annotations

import uuid
from typing import Any

from verl.multi_turn.tools.base_tool import BaseTool
from verl.multi_turn.tools.schemas import OpenAIFunctionToolSchema

# The module, not the function, so that a patched ``gsm8k.compute_score`` is the one every call sees.
from verl.utils.reward_score import gsm8k

TOOL_NAME = "calc_gsm8k_reward"
# A repeated or worse answer costs a little, so the model is not paid for calling the checker again and again.
NO_IMPROVEMENT_PENALTY = -0.05


class Gsm8kAnswerStore:
    """Per-trajectory GSM8K answers in ``self._instance_dict``: ``{id: {"response", "ground_truth", "reward"}}``.

    Shared by ``Gsm8kTool`` and ``Gsm8kInteraction``, which differ only in where the answer comes from.
    """

    _instance_dict: dict[str, dict[str, Any]]

    def _start(self, instance_id: str | None, ground_truth: str | None) -> str:
        if instance_id is None:
            instance_id = str(uuid.uuid4())
        self._instance_dict[instance_id] = {"response": "", "ground_truth": ground_truth, "reward": 0.0}
        return instance_id

    def _state(self, instance_id: str) -> dict[str, Any]:
        try:
            return self._instance_dict[instance_id]
        except KeyError:
            raise KeyError(
                f"{type(self).__name__}: no instance {instance_id!r}; it was never started or is already released"
            ) from None

    def _record(self, instance_id: str, answer: str) -> None:
        # Stored as a GSM8K answer line ("#### 72"), the form the strict scorer also reads, so either method works.
        self._state(instance_id)["response"] = answer if answer.startswith("#### ") else "#### " + answer

    def _score(self, instance_id: str) -> float:
        state = self._state(instance_id)
        return float(
            gsm8k.compute_score(
                state["response"], state["ground_truth"], method="flexible", format_score=0.0, score=1.0
            )
        )

    def _drop(self, instance_id: str) -> None:
        self._state(instance_id)
        del self._instance_dict[instance_id]


class Gsm8kTool(BaseTool, Gsm8kAnswerStore):
    """Scores the ``answer`` argument against the trajectory's GSM8K ground truth."""

    REQUIRED_CREATE_KWARGS = ("ground_truth",)  # without it every answer would silently score 0

    def __init__(self, config: dict, tool_schema: OpenAIFunctionToolSchema | None = None):
        super().__init__(config, tool_schema)
        self._instance_dict: dict[str, dict[str, Any]] = {}

    def get_openai_tool_schema(self) -> OpenAIFunctionToolSchema:
        """The ``calc_gsm8k_reward(answer: str)`` schema, used when the tool config gives none."""
        return OpenAIFunctionToolSchema.model_validate(
            {
                "type": "function",
                "function": {
                    "name": TOOL_NAME,
                    "description": "Check an answer to the GSM8K problem: reward 1.0 if the final number is "
                    "correct, 0.0 if it is wrong or no number can be read from it.",
                    "parameters": {
                        "type": "object",
                        "properties": {
                            "answer": {"type": "string", "description": "The final answer to the problem, as digits"}
                        },
                        "required": ["answer"],
                    },
                },
            }
        )

    async def create(self, instance_id: str | None = None, ground_truth: str | None = None, **kwargs) -> str:
        """Start a trajectory's state with its ``ground_truth`` (from the row's ``create_kwargs``); returns its id."""
        return self._start(instance_id, ground_truth)

    async def execute(self, instance_id: str, parameters: dict[str, Any], **kwargs) -> tuple[str, float, dict]:
        """Score ``parameters["answer"]``; the step reward is 0.0 if the score rose since the last call, else -0.05."""
        state = self._state(instance_id)
        answer = parameters.get("answer", "")
        if not isinstance(answer, str):
            # Models sometimes emit {"answer": 72}; the scorer reads text.
            answer = str(answer)
        self._record(instance_id, answer)
        reward = await self.calc_reward(instance_id)
        step_reward = 0.0 if reward > state["reward"] else NO_IMPROVEMENT_PENALTY
        state["reward"] = reward
        return f"Current parsed {answer=} {reward=}", step_reward, {}

    async def calc_reward(self, instance_id: str, **kwargs) -> float:
        """The score of the trajectory's latest answer: 1.0 if its last number equals the ground truth, else 0.0."""
        return self._score(instance_id)

    async def release(self, instance_id: str, **kwargs) -> None:
        """Drop the trajectory's state (KeyError if it was never created or already released)."""
        self._drop(instance_id)
