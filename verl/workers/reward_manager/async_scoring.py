"""Score many samples at once with a sync or ``async`` reward function, under caps on concurrency, rate and time.

A reward that calls a service (an LLM judge, a remote verifier) spends its time waiting, so the samples of a batch
are scored concurrently on an event loop: an ``async def`` function is awaited, a plain one runs in a thread. Each
call first takes a token from the requests-per-minute bucket and ``estimated_tokens`` from the tokens-per-minute
bucket, then a slot of the concurrency cap, and must finish within ``timeout`` seconds. A call that raises or
overruns scores 0 with a warning and is counted (``failed`` / ``timed_out``), never stopping the run. A sync call
that overruns is abandoned in its thread (Python cannot stop it), its result ignored.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import functools
import inspect
import logging
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

logger = logging.getLogger(__name__)

__all__ = ["AsyncTokenBucket", "CallLimits", "ScoringOutcome", "is_async_fn", "score_concurrently"]


def is_async_fn(fn) -> bool:
    """True for an ``async def`` function, also behind ``functools.partial`` / ``functools.wraps`` wrappers."""
    while isinstance(fn, functools.partial):
        fn = fn.func
    return inspect.iscoroutinefunction(fn) or inspect.iscoroutinefunction(getattr(fn, "__wrapped__", None))


class AsyncTokenBucket:
    """``rate`` tokens per second, at most ``capacity`` banked; ``acquire(n)`` waits until ``n`` are there."""

    def __init__(self, rate: float, capacity: float):
        if rate <= 0 or capacity <= 0:
            raise ValueError(f"a token bucket needs rate > 0 and capacity > 0; got rate={rate}, capacity={capacity}")
        self.rate, self.capacity = float(rate), float(capacity)
        self.tokens = self.capacity
        self.updated = time.monotonic()
        self._lock = asyncio.Lock()

    async def acquire(self, amount: float = 1.0) -> None:
        amount = min(float(amount), self.capacity)  # a request larger than the bucket waits for a full one
        while True:
            async with self._lock:
                now = time.monotonic()
                self.tokens = min(self.capacity, self.tokens + (now - self.updated) * self.rate)
                self.updated = now
                if self.tokens >= amount:
                    self.tokens -= amount
                    return
                wait = (amount - self.tokens) / self.rate
            await asyncio.sleep(wait)


@dataclass(frozen=True)
class CallLimits:
    """Caps on the calls of one batch: ``max_concurrent`` in flight, ``max_rpm`` requests and ``max_tpm`` tokens per
    minute (None: no cap), ``timeout`` seconds per call (None: none), ``estimated_tokens`` per request."""

    max_concurrent: int | None = None
    max_rpm: float | None = None
    max_tpm: float | None = None
    estimated_tokens: int = 2000
    timeout: float | None = None

    def __post_init__(self):
        for name in ("max_concurrent", "max_rpm", "max_tpm", "timeout"):
            value = getattr(self, name)
            if value is not None and not value > 0:
                raise ValueError(f"{name}={value!r} must be > 0 (or null for no cap)")


@dataclass
class ScoringOutcome:
    """Each sample's result (None where the call failed), and what went wrong."""

    results: list
    failed: list[bool] = field(default_factory=list)
    timed_out: list[bool] = field(default_factory=list)


async def _score_all(fn, calls: Sequence[dict], limits: CallLimits, pool) -> ScoringOutcome:
    semaphore = asyncio.Semaphore(limits.max_concurrent) if limits.max_concurrent else None
    # a bucket banks one second's budget (not a minute's): a burst never exceeds the per-second share of the cap
    rpm = AsyncTokenBucket(limits.max_rpm / 60.0, max(1.0, limits.max_rpm / 60.0)) if limits.max_rpm else None
    tpm = AsyncTokenBucket(limits.max_tpm / 60.0, max(1.0, limits.max_tpm / 60.0)) if limits.max_tpm else None
    use_await = is_async_fn(fn)
    loop = asyncio.get_running_loop()
    outcome = ScoringOutcome([None] * len(calls), [False] * len(calls), [False] * len(calls))

    async def one(i: int, kwargs: dict) -> None:
        if rpm is not None:
            await rpm.acquire(1.0)
        if tpm is not None:
            await tpm.acquire(limits.estimated_tokens)
        if semaphore is not None:
            await semaphore.acquire()
        try:
            call = fn(**kwargs) if use_await else loop.run_in_executor(pool, functools.partial(fn, **kwargs))
            outcome.results[i] = await asyncio.wait_for(call, timeout=limits.timeout)
        except asyncio.TimeoutError:
            outcome.failed[i] = outcome.timed_out[i] = True
            logger.warning("reward call for sample %d took longer than timeout=%ss; scoring it 0", i, limits.timeout)
        except Exception as e:  # noqa: BLE001 - one sample's failure costs that sample, never the batch
            outcome.failed[i] = True
            logger.warning("reward call for sample %d failed, scoring it 0: %s: %s", i, type(e).__name__, e)
        finally:
            if semaphore is not None:
                semaphore.release()

    await asyncio.gather(*(one(i, kwargs) for i, kwargs in enumerate(calls)))
    return outcome


def score_concurrently(fn: Callable, calls: Sequence[dict], limits: CallLimits) -> ScoringOutcome:
    """Call ``fn(**kwargs)`` for every ``kwargs`` in ``calls`` concurrently under ``limits`` (see the module doc).

    Runs its own event loop; from inside a running loop (an agent-loop worker) it runs on a helper thread."""
    workers = min(len(calls), limits.max_concurrent or 64) or 1
    pool = concurrent.futures.ThreadPoolExecutor(max_workers=workers, thread_name_prefix="reward")

    def run() -> ScoringOutcome:
        return asyncio.run(_score_all(fn, calls, limits, pool))

    try:
        try:
            asyncio.get_running_loop()
        except RuntimeError:
            return run()
        with concurrent.futures.ThreadPoolExecutor(max_workers=1) as runner:
            return runner.submit(run).result()
    finally:
        pool.shutdown(wait=False, cancel_futures=True)  # an abandoned (overrun) sync call must not block the batch
