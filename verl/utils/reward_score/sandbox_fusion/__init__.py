"""Code reward through a SandboxFusion service: run the response's program on the row's test cases over HTTP.

``default_compute_score`` routes the code data sources here when ``reward_model.sandbox_fusion.url`` is set; without
it they are scored on this machine by ``verl.utils.reward_score.prime_code`` (in the local sandbox).
"""

from __future__ import annotations

import json
import logging
import re

from verl.utils.reward_score.sandbox_fusion.utils import check_correctness

__all__ = ["compute_score", "extract_code"]

logger = logging.getLogger(__name__)

_PYTHON_BLOCK = re.compile(r"```python[^\n]*\n(.*?)```", re.DOTALL)
_ANY_BLOCK = re.compile(r"```[^\n]*\n(.*?)```", re.DOTALL)
_CONTINUOUS_CASES = 10  # continuous scoring grades only the first cases, to bound the cost of long test suites
_DEFAULT_MEMORY_LIMIT_MB = 1024


def extract_code(completion: str) -> str | None:
    """The last ```` ```python ```` block, else the first fenced block of any language, else None."""
    python_blocks = _PYTHON_BLOCK.findall(completion)
    if python_blocks:
        return python_blocks[-1]
    block = _ANY_BLOCK.search(completion)
    return block.group(1) if block else None


def _parse_test_cases(test_cases) -> dict:
    in_outs = json.loads(test_cases) if isinstance(test_cases, str) else test_cases
    if not isinstance(in_outs, dict) or "inputs" not in in_outs or "outputs" not in in_outs:
        raise ValueError(
            f"test_cases must be a dict (or JSON object) with 'inputs' and 'outputs', got {in_outs!r:.200}"
        )
    return in_outs


def compute_score(
    sandbox_fusion_url, concurrent_semaphore, memory_limit_mb, completion, test_cases, continuous=False, timeout=10
) -> tuple[float, list[dict]]:
    """``(fraction of cases passed, per-case metadata)``; 0.0 with an ``error`` entry when anything goes wrong."""
    code = extract_code(completion) if isinstance(completion, str) else None
    if code is None:
        return 0.0, [{"error": "Invalid completion (missing code block)"}]
    try:
        in_outs = _parse_test_cases(test_cases)
    except (ValueError, TypeError) as e:
        return 0.0, [{"error": f"Invalid test_cases: {e}"}]
    if continuous:
        in_outs = {**in_outs, "inputs": in_outs["inputs"][:_CONTINUOUS_CASES]}
        in_outs["outputs"] = in_outs["outputs"][:_CONTINUOUS_CASES]
    try:
        results, metadata = check_correctness(
            sandbox_fusion_url,
            in_outs,
            code,
            timeout,
            memory_limit_mb or _DEFAULT_MEMORY_LIMIT_MB,
            "python",
            concurrent_semaphore,
        )
    except Exception as e:  # a scoring failure costs this sample 0.0, never the batch
        logger.warning("sandbox_fusion.compute_score failed: %r", e)
        return 0.0, [{"error": f"{type(e).__name__}: {e}"}]
    if not results:
        return 0.0, metadata
    return sum(r is True for r in results) / len(results), metadata
