"""Geometry3K reward: 0.9 * boxed-answer accuracy + 0.1 * ``<think>`` format.

Answers are compared as normalised strings, as numbers, and as expressions built by the whitelist grammar of
``safe_expr`` (LaTeX such as ``2\\sqrt{3}`` or ``\\frac{40}{3}`` included). verl grades with mathruler, whose
symbolic step hands the answer to sympy's ``parse_expr``, i.e. Python's ``eval``: a model's ``\\boxed{9**9**9**9}``
hangs the reward process there, so that step is not used.
"""

from __future__ import annotations

import math
import re

from verl.utils.reward_score.math import is_equiv, last_boxed_only_string, remove_boxed, strip_string
from verl.utils.reward_score.safe_expr import latex_to_plain, parse_math, symbolic_equal

__all__ = ["format_reward", "acc_reward", "compute_score", "extract_boxed_content", "grade_answer"]

_FORMAT = re.compile(r"<think>.*</think>.*\\boxed\{.*\}.*", re.DOTALL)


def format_reward(predict_str: str) -> float:
    """1.0 if the output is ``<think>...</think>`` followed by an answer containing ``\\boxed{...}``."""
    return 1.0 if _FORMAT.fullmatch(predict_str) else 0.0


def extract_boxed_content(text: str) -> str:
    """The content of the last ``\\boxed{}``, or ``"None"`` when there is none (mathruler's convention)."""
    boxed = last_boxed_only_string(text)
    if boxed is None:
        return "None"
    try:
        return remove_boxed(boxed)
    except AssertionError:
        return "None"


def _number(text: str) -> float | None:
    expr = parse_math(latex_to_plain(text))
    if expr is None or not expr.is_number:
        return None
    try:
        value = complex(expr.evalf(20))
    except (TypeError, ValueError, OverflowError):
        return None
    return value.real if value.imag == 0 else None


def grade_answer(given_answer: str | None, ground_truth: str) -> bool:
    """Equal as normalised strings, as numbers (relative tolerance 1e-6), or as sympy expressions."""
    if given_answer is None:
        return False
    if is_equiv(given_answer, ground_truth):
        return True
    given, truth = strip_string(given_answer), strip_string(ground_truth)
    given_num, truth_num = _number(given), _number(truth)
    if given_num is not None and truth_num is not None:
        return math.isclose(given_num, truth_num, rel_tol=1e-6, abs_tol=1e-9)
    return symbolic_equal(given, truth)


def acc_reward(predict_str: str, ground_truth: str, use_boxed: bool = True) -> float:
    """1.0 if the (boxed) answer grades equal to ``ground_truth``."""
    answer = extract_boxed_content(predict_str) if use_boxed else predict_str
    return 1.0 if grade_answer(answer, ground_truth) else 0.0


def compute_score(predict_str: str, ground_truth: str, use_boxed: bool = True, format_score: float = 0.1) -> float:
    """``(1 - format_score) * acc + format_score * format``."""
    return (1.0 - format_score) * acc_reward(predict_str, ground_truth, use_boxed) + format_score * format_reward(
        predict_str
    )
