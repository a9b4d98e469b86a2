"""Rule reward for grade-school word problems (data source ``verl/word_problems``): the response's last number.

A pretrained instruct model answers in prose ("... so she has 17 apples left."), not in a fixed format such as
GSM8K's ``#### 17``, so the answer is taken to be the last number the response writes; it scores ``score`` when it
equals the ground truth as a number (``17``, ``17.0``, ``$17``, ``1,700`` and ``17.`` at a sentence's end all read).
"""

from __future__ import annotations

import re

__all__ = ["DATA_SOURCE", "compute_score", "last_number"]

DATA_SOURCE = "verl/word_problems"

# an optional sign, digits with optional thousands commas, an optional decimal part; a trailing "." is punctuation
_NUMBER = re.compile(r"-?\d[\d,]*(?:\.\d+)?")
# the answer is at the end; a long rambling response stays cheap to score
_TAIL_CHARS = 400


def last_number(text: str) -> float | None:
    """The last number written in ``text`` (commas dropped), or None where it writes none."""
    matches = _NUMBER.findall(text[-_TAIL_CHARS:])
    for candidate in reversed(matches):
        try:
            return float(candidate.replace(",", ""))
        except ValueError:  # e.g. "1,,": not a number after all
            continue
    return None


def compute_score(solution_str: str, ground_truth, format_score: float = 0.0, score: float = 1.0) -> float:
    """``score`` if the response's last number equals ``ground_truth``; ``format_score`` for another number; else 0."""
    answer = last_number(solution_str)
    if answer is None:
        return 0.0
    return float(score) if answer == float(ground_truth) else float(format_score)
