"""The char_count reward, passed to the trainer as ``custom_reward_function.path=<this file>``
``custom_reward_function.name=char_count_reward_function``."""

from __future__ import annotations


def char_count_reward_function(data_source, solution_str, ground_truth, extra_info=None) -> float:
    """1.0 when the response is exactly the count (surrounding whitespace ignored), else 0.0.

    The trainer calls it once per response with the decoded text (``solution_str``) and the row's
    ``reward_model.ground_truth``; ``data_source`` and ``extra_info`` come from the same row.
    """
    return 1.0 if str(solution_str).strip() == str(ground_truth).strip() else 0.0
