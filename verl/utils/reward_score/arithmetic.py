"""Exact-match rule reward for the built-in arithmetic task (data source ``verl/arithmetic``)."""

from __future__ import annotations

__all__ = ["DATA_SOURCE", "compute_score", "normalize_answer"]

DATA_SOURCE = "verl/arithmetic"


def normalize_answer(text) -> str:
    """``text`` as a string with all whitespace removed (``" 8 2\\n"`` -> ``"82"``)."""
    return "".join(str(text).split())


def compute_score(solution_str: str, ground_truth, format_score: float = 0.0, score: float = 1.0) -> float:
    """``score`` if the response is exactly the answer (whitespace ignored), else ``format_score``.

    ``format_score`` is given to a response that is a well-formed integer but the wrong one; anything else
    (empty, extra words, two answers) scores 0.0.
    """
    answer = normalize_answer(solution_str)
    if answer == normalize_answer(ground_truth):
        return float(score)
    body = answer[1:] if answer.startswith("-") else answer
    return float(format_score) if body.isdigit() else 0.0
