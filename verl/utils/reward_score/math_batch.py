"""Batched MATH scoring: the signature ``BatchRewardManager`` calls (one call for the whole batch)."""

from __future__ import annotations

from verl.utils.reward_score.math import compute_score

__all__ = ["compute_score_batched"]


def compute_score_batched(data_sources, solution_strs, ground_truths, extra_infos) -> list[float]:
    """MATH rule score for each (solution, ground truth) pair."""
    return [compute_score(solution, gt) for solution, gt in zip(solution_strs, ground_truths, strict=True)]
