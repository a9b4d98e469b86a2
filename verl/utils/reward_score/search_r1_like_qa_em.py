"""Search-R1 style QA reward: exact match of the last ``<answer>...</answer>`` against any target string."""

from __future__ import annotations

import random
import re
import string

__all__ = ["normalize_answer", "em_check", "subem_check", "extract_solution", "compute_score", "compute_score_subem"]


def normalize_answer(s: str) -> str:
    """Lowercase, drop punctuation and articles, collapse whitespace (SQuAD normalisation)."""
    s = s.lower()
    s = "".join(ch for ch in s if ch not in set(string.punctuation))
    s = re.sub(r"\b(a|an|the)\b", " ", s)
    return " ".join(s.split())


def _as_list(golden_answers) -> list[str]:
    if isinstance(golden_answers, str):
        return [golden_answers]
    return [str(a) for a in golden_answers]


def em_check(prediction: str, golden_answers) -> int:
    """1 if the normalised prediction equals a normalised golden answer."""
    pred = normalize_answer(prediction)
    return int(any(normalize_answer(g) == pred for g in _as_list(golden_answers)))


def subem_check(prediction: str, golden_answers) -> int:
    """1 if a normalised golden answer occurs inside the normalised prediction."""
    pred = normalize_answer(prediction)
    return int(any(normalize_answer(g) in pred for g in _as_list(golden_answers)))


def extract_solution(solution_str: str) -> str | None:
    """Text of the last ``<answer>...</answer>``; None if there is none."""
    matches = list(re.finditer(r"<answer>(.*?)</answer>", solution_str, re.DOTALL))
    return matches[-1].group(1).strip() if matches else None


def _count_answer_tags(text: str) -> int:
    return len(re.findall(r"<answer>", text))


def _score(check, solution_str, ground_truth, format_score, score) -> float:
    answer = extract_solution(solution_str)
    if random.randint(1, 64) == 1:  # occasional sample print, as reward functions conventionally do
        print(f"--------------------------------\nGolden answers: {ground_truth['target']}")
        print(f"Extracted answer: {answer}\nSolution string: {solution_str}")
    if answer is None:
        return 0
    if check(answer, ground_truth["target"]):
        # outputs that spam answer tags are discounted
        return score / 4 if _count_answer_tags(solution_str) > 10 else score
    return format_score


def compute_score(
    solution_str: str, ground_truth: dict, method: str = "strict", format_score: float = 0.0, score: float = 1.0
) -> float:
    """``score`` on exact match with ``ground_truth["target"]`` (÷4 past 10 answer tags), else ``format_score``."""
    return _score(em_check, solution_str, ground_truth, format_score, score)


def compute_score_subem(
    solution_str: str, ground_truth: dict, method: str = "strict", format_score: float = 0.0, score: float = 1.0
) -> float:
    """As :func:`compute_score` with substring match."""
    return _score(subem_check, solution_str, ground_truth, format_score, score)
