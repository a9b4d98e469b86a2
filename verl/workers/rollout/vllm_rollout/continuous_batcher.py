"""Step-level serving of agent-loop turns on the in-process vLLM engine (``rollout.mode=async``).

Each assistant turn is a request of its own. The server adds new requests between engine steps and hands every
finished one back to its trajectory at once, so a trajectory whose tool answered joins the running batch at the
next step instead of waiting for the slowest turn of a batched call; prefix caching reuses the KV of the
conversation so far. This is what vLLM's ``AsyncLLM`` does, without its separate engine process: the engine stays
in the worker, where the hybrid engine hands it the actor's weights in place before each generation.
"""

from __future__ import annotations

import asyncio
import uuid

from vllm.sampling_params import RequestOutputKind

from verl.workers.rollout.base import SamplingRequest

__all__ = ["ContinuousBatcher"]


class ContinuousBatcher:
    """Serves ``generate`` requests of concurrent agent loops with ``llm_engine.add_request`` / ``step``."""

    def __init__(self, rollout, request: SamplingRequest, stop_token_ids: list[int]):
        self.rollout, self.request, self.stop_token_ids = rollout, request, stop_token_ids
        self.engine = rollout.inference_engine.llm_engine
        self.engine_calls = 0  # engine steps
        self._queued: list[tuple[str, list[int], int]] = []
        self._waiting: dict[str, asyncio.Future] = {}
        self._running: dict[str, str] = {}  # our request id -> the engine's (for aborts)
        self._wake = asyncio.Event()

    async def generate(self, prompt: list[int], max_tokens: int):
        """The next assistant turn for ``prompt`` (a ``GeneratedTurn``), at most ``max_tokens`` long."""
        request_id = uuid.uuid4().hex
        future = asyncio.get_running_loop().create_future()
        self._waiting[request_id] = future
        self._queued.append((request_id, list(prompt), max_tokens))
        self._wake.set()
        return await future

    def finished(self) -> None:
        """Nothing to do: no step waits for a trajectory."""

    async def serve(self) -> None:
        """Run until cancelled: admit queued requests, step the engine, resolve the finished ones."""
        try:
            while True:
                if not self._queued and not self._running:
                    self._wake.clear()
                    await self._wake.wait()
                self._admit()
                try:
                    # A step blocks the loop on purpose (the engine is not thread-safe); tools do their blocking
                    # work in threads or processes, which keep running meanwhile.
                    outputs = self.engine.step()
                except Exception as e:  # every waiting trajectory sees the engine's error
                    self._fail(e)
                    continue
                self.engine_calls += 1
                for output in outputs:
                    if output.finished and output.request_id in self._running:
                        del self._running[output.request_id]
                        future = self._waiting.pop(output.request_id)
                        if not future.done():
                            future.set_result(self.rollout.turn_from_sample(output.outputs[0]))
                await asyncio.sleep(0)  # let woken trajectories (and tools) run before the next step
        finally:
            if self._running:  # cancelled mid-batch (a failed trajectory): free the engine for the next call
                self.engine.abort_request(list(self._running.values()))
                self._running.clear()

    def _admit(self) -> None:
        queued, self._queued = self._queued, []
        for request_id, prompt, max_tokens in queued:
            params = self.rollout.turn_params(self.request, self.stop_token_ids, max_tokens)
            params.output_kind = RequestOutputKind.FINAL_ONLY
            try:
                self._running[request_id] = self.engine.add_request(request_id, {"prompt_token_ids": prompt}, params)
            except Exception as e:  # e.g. a prompt longer than max_model_len: that trajectory fails, not the server
                self._waiting.pop(request_id).set_exception(e)

    def _fail(self, error: Exception) -> None:
        if self._running:
            self.engine.abort_request(list(self._running.values()))
        for request_id in list(self._running):
            self._waiting.pop(request_id).set_exception(error)
        self._running.clear()
