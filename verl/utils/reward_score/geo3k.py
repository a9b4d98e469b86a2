"""Geometry3K reward: 0.9 * boxed-answer accuracy (mathruler grading) + 0.1 * ``<think>`` format."""

from __future__ import annotations

import re

__all__ = ["format_reward", "acc_reward", "compute_score"]

_FORMAT = re.compile(r"<think>.*</think>.*\\boxed\{.*\}.*", re.DOTALL)


def format_reward(predict_str: str) -> float:
    """1.0 if the output is ``<think>...</think>`` followed by an answer containing ``\\boxed{...}``."""
    return 1.0 if _FORMAT.fullmatch(predict_str) else 0.0


def acc_reward(predict_str: str, ground_truth: str, use_boxed: bool = True) -> float:
    """1.0 if the (boxed) answer grades equal to ``ground_truth`` with mathruler."""
    try:
        from mathruler.grader import extract_boxed_content, grade_answer
    except ImportError as e:
        raise ImportError("the geo3k reward needs the mathruler package: pip install mathruler") from e
    answer = extract_boxed_content(predict_str) if use_boxed else predict_str
    return 1.0 if grade_answer(answer, ground_truth) else 0.0


def compute_score(predict_str: str, ground_truth: str, use_boxed: bool = True, format_score: float = 0.1) -> float:
    """``(1 - format_score) * acc + format_score * format``."""
    return (1.0 - format_score) * acc_reward(predict_str, ground_truth, use_boxed) + format_score * format_reward(
        predict_str
    )
