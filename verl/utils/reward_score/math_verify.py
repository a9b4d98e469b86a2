"""Math reward through HuggingFace's ``math-verify`` (symbolic equivalence of parsed answers)."""

from __future__ import annotations

__all__ = ["compute_score"]

_MAX_ANSWER_CHARS = 1000


def compute_score(model_output: str, ground_truth: str, timeout_score: float = 0) -> float:
    """1.0 if math-verify finds ``model_output`` equal to ``\\boxed{ground_truth}``; timeouts give ``timeout_score``."""
    try:
        from math_verify.errors import TimeoutException
        from math_verify.metric import math_metric
        from math_verify.parser import ExprExtractionConfig, LatexExtractionConfig
    except ImportError as e:
        raise ImportError("the math_verify reward needs the math-verify package: pip install math-verify") from e
    verify = math_metric(
        gold_extraction_target=(LatexExtractionConfig(),),
        pred_extraction_target=(ExprExtractionConfig(), LatexExtractionConfig()),
    )
    # the final answer is at the end; a response's earlier text only costs parse time (a 6,000-character nesting of
    # brackets took math-verify over 30 s on a loaded 2-core box)
    model_output = model_output[-_MAX_ANSWER_CHARS:]
    try:
        score, _ = verify(["\\boxed{" + ground_truth + "}"], [model_output])
    except TimeoutException:
        return timeout_score
    except Exception:  # unparsable output scores 0
        return 0.0
    return float(score)
