"""Batched generation for trajectories that each run as their own coroutine.

Every trajectory awaits ``generate`` for its next turn; the batcher serves all requests that are ready in one
engine call. A trajectory still waiting on a slow tool does not hold the others back: the batch goes as soon as
every trajectory that could submit has done so (the event loop has nothing else runnable), not when all of them
have.
"""

from __future__ import annotations

import asyncio

from verl.workers.rollout.base import SamplingRequest

__all__ = ["TurnBatcher"]

# Event-loop passes that let trajectories just woken up (a finished turn, a fast tool) reach their next request.
_SETTLE_PASSES = 4


class TurnBatcher:
    """Serves ``generate`` requests of concurrent trajectories with ``engine.generate_turns`` calls."""

    def __init__(self, engine, request: SamplingRequest, stop_token_ids: list[int], live: int):
        self.engine, self.request, self.stop_token_ids = engine, request, stop_token_ids
        self.live = live  # trajectories not finished yet
        self.engine_calls = 0
        self._pending: list[tuple[list[int], int, asyncio.Future]] = []
        self._wake = asyncio.Event()

    async def generate(self, prompt: list[int], max_tokens: int):
        """The next assistant turn for ``prompt`` (a ``GeneratedTurn``), at most ``max_tokens`` long."""
        future = asyncio.get_running_loop().create_future()
        self._pending.append((prompt, max_tokens, future))
        self._wake.set()
        return await future

    def finished(self) -> None:
        """A trajectory ended: the batch no longer waits for it."""
        self.live -= 1
        self._wake.set()

    async def serve(self) -> None:
        """Run until cancelled: wait for requests, let the others catch up, serve them in one engine call."""
        while True:
            await self._wake.wait()
            self._wake.clear()
            while len(self._pending) < self.live:
                before = len(self._pending)
                for _ in range(_SETTLE_PASSES):
                    await asyncio.sleep(0)
                if len(self._pending) == before:
                    break
            batch, self._pending = self._pending, []
            if not batch:
                continue
            try:
                # The engine call blocks the loop on purpose: the engine is not thread-safe, and tools do their
                # blocking work in threads (asyncio.to_thread), which keep running meanwhile.
                turns = self.engine.generate_turns(
                    [p for p, _, _ in batch], [m for _, m, _ in batch], self.request, self.stop_token_ids
                )
                self.engine_calls += 1
            except Exception as e:  # every waiting trajectory sees the engine's error
                for _, _, future in batch:
                    future.set_exception(e)
                continue
            for (_, _, future), turn in zip(batch, turns, strict=True):
                future.set_result(turn)
