"""The GSM8K answer checker as a tool: the model submits its answer mid-trajectory and learns whether it is right.

Configure it with ``examples/multiturn/config/tool_config/gsm8k_tool_config.yaml`` and rows made by
``examples/data_preprocess/gsm8k_multiturn_w_tool.py``, whose ``tools_kwargs`` give each trajectory its
``ground_truth`` through ``create``.
"""

from __future__ import annotations

from verl.multi_turn.tools.answer_check_tool import NO_IMPROVEMENT_PENALTY, AnswerCheckTool, AnswerStore

# The module, not the function, so that a patched ``gsm8k.compute_score`` is the one every call sees.
from verl.utils.reward_score import gsm8k

__all__ = ["NO_IMPROVEMENT_PENALTY", "TOOL_NAME", "Gsm8kAnswerStore", "Gsm8kTool"]

TOOL_NAME = "calc_gsm8k_reward"


class Gsm8kAnswerStore(AnswerStore):
    """GSM8K answers, 1.0 when their last number equals the ground truth (``Gsm8kTool``, ``Gsm8kInteraction``)."""

    def _stored_form(self, answer: str) -> str:
        # Stored as a GSM8K answer line ("#### 72"), the form the strict scorer also reads, so either method works.
        return answer if answer.startswith("#### ") else "#### " + answer

    def _grade(self, response: str, ground_truth: str | None) -> float:
        return gsm8k.compute_score(response, ground_truth, method="flexible", format_score=0.0, score=1.0)


class Gsm8kTool(AnswerCheckTool, Gsm8kAnswerStore):
    """Scores the ``answer`` argument against the trajectory's GSM8K ground truth."""

    TOOL_NAME = TOOL_NAME
    DESCRIPTION = (
        "Check an answer to the GSM8K problem: reward 1.0 if the final number is correct, 0.0 if it is wrong or no "
        "number can be read from it."
    )
    ANSWER_DESCRIPTION = "The final answer to the problem, as digits"
