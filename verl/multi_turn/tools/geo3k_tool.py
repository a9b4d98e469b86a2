"""The Geometry3K answer checker as a tool (verl's ``calc_geo3k_reward``): the model submits an answer mid-trajectory
and learns whether it is right.

Configure it with ``examples/multiturn/config/tool_config/geo3k_tool_config.yaml`` and rows made by
``examples/data_preprocess/geo3k_multiturn_w_tool.py``, whose ``tools_kwargs`` give each trajectory its
``ground_truth`` through ``create``. The answer is graded as a whole (no ``\\boxed{}`` needed) by the geo3k scorer's
equivalence test: as a normalised string, a number or an expression (``verl.utils.reward_score.geo3k``), with no
credit for format.
"""

from __future__ import annotations

from verl.multi_turn.tools.answer_check_tool import AnswerCheckTool

# The module, not the function, so that a patched ``geo3k.compute_score`` is the one every call sees.
from verl.utils.reward_score import geo3k

__all__ = ["TOOL_NAME", "Geo3kTool"]

TOOL_NAME = "calc_geo3k_reward"


class Geo3kTool(AnswerCheckTool):
    """Grades the ``answer`` argument against the trajectory's Geometry3K ground truth: 1.0 if equal, else 0.0."""

    TOOL_NAME = TOOL_NAME
    DESCRIPTION = (
        "Check an answer to the geometry problem: reward 1.0 if it equals the correct answer, 0.0 if it is wrong or "
        "cannot be read."
    )
    ANSWER_DESCRIPTION = "The final answer to the problem (a number or an expression such as 2\\sqrt{3})"

    def _grade(self, response: str, ground_truth: str | None) -> float:
        return geo3k.compute_score(response, ground_truth, use_boxed=False, format_score=0.0)
