"""DAPO math reward: ``Answer: ...`` (Minerva style) or the last ``\\boxed{}`` compared after normalisation; ±1."""

from __future__ import annotations

import re

from verl.utils.reward_score.math import last_boxed_only_string, remove_boxed

__all__ = ["compute_score", "normalize_final_answer", "is_correct_minerva", "is_correct_strict_box"]

_CLIP_CHARS = 300
_ANSWER_PATTERN = r"(?i)Answer\s*:\s*([^\n]+)"

# Phrases and units that carry no value in a final answer (Minerva's normalisation list, rewritten).
_SUBSTITUTIONS = [("an ", ""), ("a ", ""), (".$", "$"), ("\\$", ""), (r"\ ", ""), (" ", ""), ("mbox", "text"),
                  (",\\text{and}", ","), ("\\text{and}", ","), ("\\text{m}", "\\text{}")]  # fmt: skip
_REMOVED = ["square", "ways", "integers", "dollars", "mph", "inches", "hours", "km", "units", "\\ldots", "sue",
            "points", "feet", "minutes", "digits", "cents", "degrees", "cm", "gm", "pounds", "meters", "meals",
            "edges", "students", "childrentickets", "multiples", "\\text{s}", "\\text{.}", "\\text{\ns}",
            "\\text{}^2", "\\text{}^3", "\\text{\n}", "\\text{}", r"\mathrm{th}", r"^\circ", r"^{\circ}", r"\;",
            r",\!", "{,}", '"', "\\dots"]  # fmt: skip


def normalize_final_answer(final_answer: str) -> str:
    """Canonical form of a final answer: drop units/words, ``\\text{}`` wrappers, ``$``, thousands commas."""
    final_answer = final_answer.split("=")[-1]
    for before, after in _SUBSTITUTIONS:
        final_answer = final_answer.replace(before, after)
    for expr in _REMOVED:
        final_answer = final_answer.replace(expr, "")
    final_answer = re.sub(r"(.*?)(\$)(.*?)(\$)(.*)", "$\\3$", final_answer)
    final_answer = re.sub(r"(\\text\{)(.*?)(\})", "\\2", final_answer)
    final_answer = re.sub(r"(\\textbf\{)(.*?)(\})", "\\2", final_answer)
    final_answer = re.sub(r"(\\overline\{)(.*?)(\})", "\\2", final_answer)
    final_answer = re.sub(r"(\\boxed\{)(.*)(\})", "\\2", final_answer)
    final_answer = re.sub(r"(frac)([^{])(.)", "frac{\\2}{\\3}", final_answer)
    final_answer = re.sub(r"(sqrt)([^{])", "sqrt{\\2}", final_answer)
    final_answer = final_answer.replace("$", "")
    if final_answer.replace(",", "").isdigit():
        final_answer = final_answer.replace(",", "")
    return final_answer.strip()


def is_correct_minerva(solution_str: str, gt: str, gt_need_extract: bool = False) -> tuple[bool, str]:
    """Compare the last ``Answer: ...`` of ``solution_str`` with ``gt`` after normalisation; returns (ok, pred)."""
    matches = re.findall(_ANSWER_PATTERN, solution_str)
    pred = normalize_final_answer(matches[-1]) if matches else "[INVALID]"
    if gt_need_extract:
        boxed = last_boxed_only_string(gt)
        gt = normalize_final_answer(remove_boxed(boxed)) if boxed else gt
    else:
        gt = normalize_final_answer(gt)
    return pred == gt, pred


def is_correct_strict_box(pred: str, gt: str, pause_tokens_index: list[int] | None = None) -> tuple[int, str | None]:
    """1 if the last ``\\boxed{}`` (after the last pause token, if given) equals ``gt`` exactly, else -1."""
    if pause_tokens_index is not None:
        assert len(pause_tokens_index) == 4, f"pause_tokens_index must have 4 entries, got {pause_tokens_index}"
        pred = pred[pause_tokens_index[-1] - 100 :]
    else:
        pred = pred[-100:]
    boxed = last_boxed_only_string(pred)
    extracted = remove_boxed(boxed) if boxed is not None else None
    return (1 if extracted == gt else -1), extracted


def verify(solution_str: str, answer: str, strict_box_verify: bool = False, pause_tokens_index=None):
    """(correct, prediction) by the strict-box or the Minerva check."""
    if strict_box_verify:
        correct, pred = is_correct_strict_box(solution_str, answer, pause_tokens_index)
        return correct == 1, pred
    return is_correct_minerva(solution_str, answer)


def compute_score(
    solution_str: str, ground_truth: str, strict_box_verify: bool = False, pause_tokens_index: list[int] | None = None
) -> dict:
    """``{"score": 1.0 or -1.0, "acc": bool, "pred": str}`` for the last 300 characters of ``solution_str``."""
    solution_str = solution_str[-_CLIP_CHARS:]
    correct, pred = verify(solution_str, ground_truth, strict_box_verify, pause_tokens_index)
    return {"score": 1.0 if correct else -1.0, "acc": correct, "pred": pred}
