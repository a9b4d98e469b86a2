"""Batched generation for trajectories that each run as their own coroutine.

Every trajectory awaits ``generate`` for its next turn; the batcher serves all requests that are ready in one
engine call. A trajectory still waiting on a slow tool does not hold the others back: the batch goes as soon as
every trajectory that could submit has done so (the event loop has nothing else runnable), not when all of them
have.

Several generate calls may share one batcher (``stream``): their trajectories' turns go to the engine together when
they sample alike, so a second batch in flight fills the engine while the first one's trajectories wait on tools.
"""

from __future__ import annotations

import asyncio

from verl.workers.rollout.base import SamplingRequest

__all__ = ["TurnBatcher", "TurnStream"]

# Event-loop passes that let trajectories just woken up (a finished turn, a fast tool) reach their next request.
_SETTLE_PASSES = 4


class TurnStream:
    """One generate call's view of a shared :class:`TurnBatcher`: its sampling ``request`` and stop ids, its live
    trajectories, and the engine calls that served them (``engine_calls``)."""

    def __init__(self, batcher: TurnBatcher, request: SamplingRequest, stop_token_ids: list[int], live: int):
        self.batcher, self.request, self.stop_token_ids = batcher, request, list(stop_token_ids)
        self.engine_calls = 0
        self.live = live
        batcher.live += live

    async def generate(self, prompt: list[int], max_tokens: int):
        """The next assistant turn for ``prompt`` (a ``GeneratedTurn``), at most ``max_tokens`` long."""
        return await self.batcher.submit(self, prompt, max_tokens)

    def finished(self) -> None:
        """A trajectory ended: the batch no longer waits for it."""
        self.live -= 1
        self.batcher.finished()

    def samples_like(self, other: TurnStream) -> bool:
        return self.request == other.request and self.stop_token_ids == other.stop_token_ids


class TurnBatcher:
    """Serves ``generate`` requests of concurrent trajectories with ``engine.generate_turns`` calls.

    Built with a ``request`` it is one call's server (``generate`` / ``finished`` / ``serve``); built without one it
    is shared: each call takes a :meth:`stream`, and one :meth:`serve` task serves them all."""

    def __init__(
        self, engine, request: SamplingRequest | None = None, stop_token_ids: list[int] | None = None, live: int = 0
    ):
        self.engine = engine
        self.live = 0  # trajectories not finished yet, over all streams
        self._pending: list[tuple[TurnStream, list[int], int, asyncio.Future]] = []
        self._wake = asyncio.Event()
        self._own = TurnStream(self, request, stop_token_ids or [], live) if request is not None else None

    @property
    def engine_calls(self) -> int:
        return self._own.engine_calls if self._own is not None else 0

    def stream(self, request: SamplingRequest, stop_token_ids: list[int], live: int) -> TurnStream:
        """A generate call's view: ``live`` more trajectories sampling with ``request``."""
        return TurnStream(self, request, stop_token_ids, live)

    async def generate(self, prompt: list[int], max_tokens: int):
        """The next assistant turn for ``prompt`` (one call's server)."""
        return await self.submit(self._own, prompt, max_tokens)

    async def submit(self, stream: TurnStream, prompt: list[int], max_tokens: int):
        future = asyncio.get_running_loop().create_future()
        self._pending.append((stream, prompt, max_tokens, future))
        self._wake.set()
        return await future

    def finished(self) -> None:
        """A trajectory ended: the batch no longer waits for it."""
        if self._own is not None and self._own.live > 0:  # one call's server: its trajectories are the stream's
            self._own.live -= 1
        self.live -= 1
        self._wake.set()

    async def serve(self) -> None:
        """Run until cancelled: wait for requests, let the others catch up, serve them in one engine call per way of
        sampling."""
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
            groups: list[list] = []
            for entry in batch:
                group = next((g for g in groups if g[0][0].samples_like(entry[0])), None)
                if group is None:
                    groups.append([entry])
                else:
                    group.append(entry)
            for group in groups:
                self._serve_group(group)

    def _serve_group(self, group: list) -> None:
        stream = group[0][0]
        try:
            # The engine call blocks the loop on purpose: the engine is not thread-safe, and tools do their
            # blocking work in threads (asyncio.to_thread), which keep running meanwhile.
            turns = self.engine.generate_turns(
                [p for _, p, _, _ in group], [m for _, _, m, _ in group], stream.request, stream.stop_token_ids
            )
        except Exception as e:  # every waiting trajectory sees the engine's error
            for _, _, _, future in group:
                if not future.done():
                    future.set_exception(e)
            return
        for served in {id(s): s for s, _, _, _ in group}.values():
            served.engine_calls += 1
        for (_, _, _, future), turn in zip(group, turns, strict=True):
            if not future.done():  # a cancelled trajectory (its call failed) no longer waits
                future.set_result(turn)
