"""GSM8K rule reward: the number after ``#### `` must equal the ground truth."""

from __future__ import annotations

import re

__all__ = ["extract_solution", "compute_score"]

# Only the tail is searched: the final answer is at the end, and long rambling outputs stay cheap to score.
_SOLUTION_CLIP_CHARS = 300
_STRICT = re.compile(r"#### (\-?[0-9\.\,]+)")
_FLEXIBLE = re.compile(r"(\-?[0-9\.\,]+)")


def extract_solution(solution_str: str, method: str = "strict") -> str | None:
    """The answer in ``solution_str``: after the last ``#### `` (strict) or its last number (flexible); else None."""
    if method not in ("strict", "flexible"):
        raise ValueError(f"method={method!r} is not supported; expected 'strict' or 'flexible'")
    tail = solution_str[-_SOLUTION_CLIP_CHARS:] if len(solution_str) > _SOLUTION_CLIP_CHARS else solution_str
    if method == "strict":
        matches = _STRICT.findall(tail)
        if not matches:
            return None
        return matches[-1].replace(",", "").replace("$", "")
    for candidate in reversed(_FLEXIBLE.findall(tail)):
        if candidate not in ("", "."):
            return candidate
    return None


def compute_score(
    solution_str: str, ground_truth: str, method: str = "strict", format_score: float = 0.0, score: float = 1.0
) -> float:
    """``score`` if the extracted answer equals ``ground_truth`` (as strings), else ``format_score``; 0 if none."""
    answer = extract_solution(solution_str, method=method)
    if answer is None:
        return 0
    return score if answer == ground_truth else format_score
