"""Code reward without a sandbox service: run the ```python block against stdin/stdout test cases locally.

Model-written code runs on this machine in ``verl.utils.sandbox.run_python``: a fresh interpreter per case with
CPU, memory and file-size limits, no network and no writes outside its own temporary directory (see that module for
what each isolation layer does and what it cannot stop). Set ``reward_model.sandbox_fusion.url`` to run it in a
SandboxFusion service instead.
"""

from __future__ import annotations

import json

from verl.utils.reward_score.prime_code.testing_util import run_test

__all__ = ["compute_score", "extract_code"]


def extract_code(completion: str) -> str:
    """Text between the last ```` ```python ```` and the next fence (the whole completion if there is none)."""
    if "```python" not in completion:
        return completion
    return completion.split("```python")[-1].split("```")[0]


def compute_score(completion: str, test_cases, continuous: bool = False) -> tuple:
    """``(score, metadata)``: True when every case passes; with ``continuous`` the passing fraction of the first 10."""
    code = extract_code(completion)
    try:
        in_outs = json.loads(test_cases) if isinstance(test_cases, str) else test_cases
        results, metadata = run_test(in_outs, code, timeout=5)
    except Exception as e:  # bad test data or a harness error scores 0, never crashes the reward loop
        return False, [{"error": repr(e)}]
    if results and all(r is True for r in results):
        return True, metadata
    if continuous:
        first = results[:10]
        return (sum(r is True for r in first) / len(first) if first else 0.0), metadata
    return False, metadata
