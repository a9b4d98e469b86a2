"""An answer checker as a tool: the model submits its answer mid-trajectory and learns how it scores.

Each trajectory's ground truth comes from its row (``extra_info.tools_kwargs[<name>]["create_kwargs"]``) through
``create``; every call grades the submitted ``answer`` against it. A subclass names the tool and says how an answer is
graded (:class:`verl.multi_turn.tools.gsm8k_tool.Gsm8kTool`, :class:`verl.multi_turn.tools.geo3k_tool.Geo3kTool`).
"""

from __future__ import annotations

import uuid
from typing import Any, ClassVar

from verl.multi_turn.tools.base_tool import BaseTool
from verl.multi_turn.tools.schemas import OpenAIFunctionToolSchema

# A repeated or worse answer costs a little, so the model is not paid for calling the checker again and again.
NO_IMPROVEMENT_PENALTY = -0.05


class AnswerStore:
    """Per-trajectory answers in ``self._instance_dict``: ``{id: {"response", "ground_truth", "reward"}}``.

    Shared by the answer-checking tools and interactions, which differ in where the answer comes from; a subclass
    grades (``_grade``) and may put an answer in the form its grader reads (``_stored_form``).
    """

    _instance_dict: dict[str, dict[str, Any]]

    def _grade(self, response: str, ground_truth: str | None) -> float:
        raise NotImplementedError

    def _stored_form(self, answer: str) -> str:
        return answer

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
        self._state(instance_id)["response"] = self._stored_form(answer)

    def _score(self, instance_id: str) -> float:
        state = self._state(instance_id)
        return float(self._grade(state["response"], state["ground_truth"]))

    def _drop(self, instance_id: str) -> None:
        self._state(instance_id)
        del self._instance_dict[instance_id]


class AnswerCheckTool(BaseTool, AnswerStore):
    """Grades the ``answer`` argument against the trajectory's ground truth; a subclass sets ``TOOL_NAME``,
    ``DESCRIPTION`` and ``ANSWER_DESCRIPTION`` (the default schema) and ``_grade``."""

    TOOL_NAME: ClassVar[str]
    DESCRIPTION: ClassVar[str]
    ANSWER_DESCRIPTION: ClassVar[str]
    REQUIRED_CREATE_KWARGS = ("ground_truth",)  # without it every answer would silently score 0

    def __init__(self, config: dict, tool_schema: OpenAIFunctionToolSchema | None = None):
        super().__init__(config, tool_schema)
        self._instance_dict: dict[str, dict[str, Any]] = {}

    def get_openai_tool_schema(self) -> OpenAIFunctionToolSchema:
        """``TOOL_NAME(answer: str)``, used when the tool config gives no schema."""
        return OpenAIFunctionToolSchema.model_validate(
            {
                "type": "function",
                "function": {
                    "name": self.TOOL_NAME,
                    "description": self.DESCRIPTION,
                    "parameters": {
                        "type": "object",
                        "properties": {"answer": {"type": "string", "description": self.ANSWER_DESCRIPTION}},
                        "required": ["answer"],
                    },
                },
            }
        )

    async def create(self, instance_id: str | None = None, ground_truth: str | None = None, **kwargs) -> str:
        """Start a trajectory's state with its ``ground_truth`` (from the row's ``create_kwargs``); returns its id."""
        return self._start(instance_id, ground_truth)

    async def execute(self, instance_id: str, parameters: dict[str, Any], **kwargs) -> tuple[str, float, dict]:
        """Grade ``parameters["answer"]``; the step reward is 0.0 if the score rose since the last call, else -0.05."""
        state = self._state(instance_id)
        answer = parameters.get("answer", "")
        if not isinstance(answer, str):
            # Models sometimes emit {"answer": 72}; the graders read text.
            answer = str(answer)
        self._record(instance_id, answer)
        reward = await self.calc_reward(instance_id)
        step_reward = 0.0 if reward > state["reward"] else NO_IMPROVEMENT_PENALTY
        state["reward"] = reward
        return f"Current parsed {answer=} {reward=}", step_reward, {}

    async def calc_reward(self, instance_id: str, **kwargs) -> float:
        """The grade of the trajectory's latest answer."""
        return self._score(instance_id)

    async def release(self, instance_id: str, **kwargs) -> None:
        """Drop the trajectory's state (KeyError if it was never created or already released)."""
        self._drop(instance_id)
