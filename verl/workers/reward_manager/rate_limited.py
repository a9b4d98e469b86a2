"""``reward_model.reward_manager=rate_limited`` (alias ``limited``): the naive manager's scoring, every sample of a
batch at once, under caps for a reward that calls a service (an LLM judge behind an API, a remote verifier).

``max_concurrent`` calls in flight, ``max_rpm`` requests and ``max_tpm`` tokens per minute (each request counted
as ``estimated_tokens_per_request``), ``timeout`` seconds per call. The reward function may be ``async def`` (awaited
on the event loop) or plain (run in a thread). A call that fails or times out scores 0 with a warning and is counted
(``reward/failed_calls``); it never stops the run. Calls of one manager run one after another (the reward loop's
scoring threads take turns), so the caps hold across calls. The keys are ``reward_model.{max_concurrent, max_rpm,
max_tpm, estimated_tokens_per_request, timeout}``, as in verl's reward loop.
"""

from __future__ import annotations

import threading

from verl.workers.reward_manager.async_scoring import CallLimits
from verl.workers.reward_manager.naive import NaiveRewardManager
from verl.workers.reward_manager.registry import register

__all__ = ["RateLimitedRewardManager"]


class RateLimitedRewardManager(NaiveRewardManager):
    """A naive manager whose calls run concurrently under :class:`CallLimits`."""

    def __init__(
        self,
        tokenizer,
        num_examine: int,
        compute_score=None,
        reward_fn_key: str = "data_source",
        max_concurrent: int = 1,
        max_rpm: float | None = None,
        max_tpm: float | None = None,
        estimated_tokens_per_request: int = 2000,
        timeout: float = 300.0,
    ) -> None:
        super().__init__(tokenizer, num_examine, compute_score, reward_fn_key, timeout_s=timeout)
        self._one_call_at_a_time = threading.Lock()
        self.limits = CallLimits(
            max_concurrent=max_concurrent,
            max_rpm=max_rpm,
            max_tpm=max_tpm,
            estimated_tokens=estimated_tokens_per_request,
            timeout=timeout,
        )

    def _score_batch(self, calls: list[dict]):
        # the caps hold per call: concurrent calls (the reward loop's scoring threads) take turns, so they hold for
        # the whole run
        with self._one_call_at_a_time:
            return self._score_concurrently(calls, self.limits)


register("rate_limited")(RateLimitedRewardManager)
register("limited")(RateLimitedRewardManager)
