"""PRIME math reward: extract the final answer and grade it numerically or symbolically (with a time limit)."""

from __future__ import annotations

import math as _pymath
import re

from verl.utils.reward_score.math import is_equiv, last_boxed_only_string, remove_boxed, strip_string
from verl.utils.reward_score.safe_expr import symbolic_equal

__all__ = ["compute_score", "extract_answer", "math_equal"]

_ANSWER_IS = re.compile(r"(?i)(?:final answer|answer) is[:\s]*\$?([^\n$]+)")


def extract_answer(model_output: str) -> str | None:
    """The last ``\\boxed{}`` content, else the text after the last "answer is"; None if neither."""
    boxed = last_boxed_only_string(model_output)
    if boxed is not None:
        try:
            return remove_boxed(boxed)
        except AssertionError:
            return None
    matches = _ANSWER_IS.findall(model_output)
    return matches[-1].strip().rstrip(".") if matches else None


def _to_number(text: str) -> float | None:
    """A float from plain numbers, percentages, ``\\frac{a}{b}``, ``a/b`` and ``\\pi`` multiples; else None."""
    s = strip_string(text).replace(",", "")
    s = s.replace("\\pi", "*pi").lstrip("*") if "\\pi" in s else s
    m = re.fullmatch(r"\\frac\{(-?[\d.]+)\}\{(-?[\d.]+)\}", s)
    if m:
        return float(m.group(1)) / float(m.group(2))
    if re.fullmatch(r"-?[\d.]*\*?pi", s):
        coef = s.replace("*pi", "").replace("pi", "")
        return (float(coef) if coef not in ("", "-") else (-1.0 if coef == "-" else 1.0)) * _pymath.pi
    try:
        return float(s)
    except ValueError:
        return None


def math_equal(prediction: str, reference: str, rel_tol: float = 1e-4, timeout_s: float = 5.0) -> bool:
    """Equal as normalised strings, as numbers (also ×100 / ÷100 for percentages), or symbolically."""
    if prediction is None or reference is None:
        return False
    if is_equiv(prediction, reference):
        return True
    pred_num, ref_num = _to_number(prediction), _to_number(reference)
    if pred_num is not None and ref_num is not None:
        return any(_pymath.isclose(pred_num, r, rel_tol=rel_tol) for r in (ref_num, ref_num * 100, ref_num / 100))
    # the answer is model output: parsed by a whitelist grammar, never evaluated as Python (safe_expr)
    return symbolic_equal(strip_string(prediction), strip_string(reference), timeout_s=timeout_s)


def compute_score(model_output: str, ground_truth: str) -> tuple[bool, bool, str | None]:
    """``(is_correct, format_correctness, extracted_answer)``; format is correct when an answer was found."""
    answer = extract_answer(model_output)
    if answer is None:
        return False, False, None
    return math_equal(answer, str(ground_truth)), True, answer
