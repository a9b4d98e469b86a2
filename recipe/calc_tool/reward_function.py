"""The calc_tool reward, passed to the trainer as ``custom_reward_function.path=<this file>``
``custom_reward_function.name=calc_tool_reward_function``."""

from __future__ import annotations

import re

_ANSWER = re.compile(r"answer: (-?\d+)")


def calc_tool_reward_function(data_source, solution_str, ground_truth, extra_info=None) -> float:
    """1.0 when the last line of the response is exactly ``answer: <ground_truth>``, else 0.0.

    ``solution_str`` is the whole decoded multi-turn response (tool calls and tool results included, the chat
    template's special tokens dropped); only its last line, the final assistant turn, is the answer, so a
    trajectory that ends inside a tool call or at the length limit scores 0.
    """
    lines = str(solution_str).strip().splitlines()
    match = _ANSWER.fullmatch(lines[-1].strip()) if lines else None
    return 1.0 if match is not None and match.group(1) == str(ground_truth).strip() else 0.0
