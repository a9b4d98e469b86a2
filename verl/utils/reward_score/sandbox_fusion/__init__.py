"""SandboxFusion code scoring (remote execution service): not available in this build."""

from __future__ import annotations

__all__ = ["compute_score"]

_MESSAGE = (
    "SandboxFusion code scoring is not implemented in this build (it needs a SandboxFusion HTTP service). "
    "Unset reward_model.sandbox_fusion.url to score code datasets locally with verl.utils.reward_score.prime_code, "
    "or pass custom_reward_function.path with your own client."
)


def compute_score(
    sandbox_fusion_url, concurrent_semaphore, memory_limit_mb, completion, test_cases, continuous=False, timeout=10
):
    """Raises NotImplementedError saying how to score code without the sandbox service."""
    raise NotImplementedError(_MESSAGE)
