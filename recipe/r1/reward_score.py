"""R1-style benchmark scoring, routed by data source (``custom_reward_function.path`` of ``main_eval``).

Reasoning models write a ``<think>...</think>`` block before their answer; only the text after the last
``</think>`` is graded (a response whose thinking never ends has no answer). Math benchmarks compare the last
``\\boxed{}`` with the reference after MATH normalization; multiple-choice benchmarks (GPQA) compare the chosen
letter. Any other data source falls back to the project's ``default_compute_score``.
"""

from __future__ import annotations

import re

from verl.utils.reward_score import default_compute_score
from verl.utils.reward_score.math import is_equiv, last_boxed_only_string, remove_boxed

__all__ = ["CHOICE_SOURCES", "MATH_SOURCES", "compute_score", "extract_choice", "final_answer_text", "score_math"]

MATH_SOURCES = (
    "HuggingFaceH4/MATH-500",
    "opencompass/aime2025",
    "opencompass/cnmo2024_en",
)
CHOICE_SOURCES = ("Idavidrein/gpqa",)

# "Answer: C", "answer is (C)", "**Answer:** C" ...; the letter must be a capital (so "the answer is a ..." is no
# choice); the last one in the text wins
_ANSWER_LINE = re.compile(r"(?i:answer)\s*(?i:is)?\s*[:：]?\s*\**\s*\(?\s*([A-D])\b")


def final_answer_text(solution_str: str) -> str | None:
    """The part of a response after its reasoning: after the last ``</think>``; None when a ``<think>`` never
    closes; the whole text when there is no thinking block."""
    if "</think>" in solution_str:
        return solution_str.rsplit("</think>", 1)[1]
    if "<think>" in solution_str:
        return None
    return solution_str


def score_math(answer_text: str, ground_truth: str) -> float:
    """1.0 when the last ``\\boxed{}`` of ``answer_text`` equals ``ground_truth`` after MATH normalization."""
    boxed = last_boxed_only_string(answer_text)
    if boxed is None:
        return 0.0
    try:
        return 1.0 if is_equiv(remove_boxed(boxed), str(ground_truth)) else 0.0
    except AssertionError:  # a malformed box
        return 0.0


def extract_choice(answer_text: str) -> str | None:
    """The letter (A-D) a multiple-choice answer picks: the last ``Answer: X`` line, else the last ``\\boxed{X}``."""
    matches = _ANSWER_LINE.findall(answer_text)
    if matches:
        return matches[-1]
    boxed = last_boxed_only_string(answer_text)
    if boxed is not None:
        inner = remove_boxed(boxed).strip().strip("()").replace("\\text{", "").rstrip("}").strip()
        if len(inner) == 1 and inner.upper() in "ABCD":
            return inner.upper()
    return None


def compute_score(data_source, solution_str, ground_truth, extra_info=None, **kwargs) -> float:
    """The score (0 or 1 for the R1 benchmarks) of one response; see the module docstring for the routing."""
    if data_source in MATH_SOURCES or str(data_source).startswith("aime"):
        answer = final_answer_text(solution_str)
        return 0.0 if answer is None else score_math(answer, ground_truth)
    if data_source in CHOICE_SOURCES:
        answer = final_answer_text(solution_str)
        return 1.0 if answer is not None and extract_choice(answer) == str(ground_truth).strip().upper() else 0.0
    return default_compute_score(data_source, solution_str, ground_truth, extra_info, **kwargs)
