"""verl's reward loop (``reward_model.use_reward_loop=True``): rewards computed as the responses finish.

The trainer generates the batch in chunks (the HF rollout's micro batch on every worker, which it would generate one
after another anyway) and hands each finished chunk to a background thread that scores it with the run's reward
manager while the next chunk generates. The trainer's reward phase then only records which rows it needs; the wait
for what is still being scored happens where the rewards are first read (the advantage phase), so scoring also
overlaps the log-prob, reference and value passes. A generation that cannot be cut (vLLM, agent loops, no
``rollout.micro_batch_size``) is one chunk: its scoring overlaps the phases after generation only.

Each row keeps a run-wide id in the ``reward_loop_row`` column from generation to the reward phase, so the rewards
come back in the batch's order after the rows were rebalanced across ranks. One scoring thread: the reward function
is called with the same concurrency as on the batch path (an ``async`` function's calls still run concurrently
within a chunk), so what the loop gains is the overlap alone.
"""

from __future__ import annotations

import concurrent.futures
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np
import torch

from verl.protocol import DataProto
from verl.trainer.ppo.reward import PendingReward, compute_reward
from verl.workers.reward_manager.naive import merge_extra_info

__all__ = ["GENERATION_CHUNK", "ROW_KEY", "RewardLoop", "StreamedReward", "generation_chunk_prompts"]

# the run-wide id of a generated row, from generation to the reward phase (popped there)
ROW_KEY = "reward_loop_row"
# meta_info key of a chunk's index, read by pop_generation_inputs and the rollout worker's sampling seed
GENERATION_CHUNK = "generation_chunk"


def generation_chunk_prompts(rollout, world_size: int, batch_size: int) -> int:
    """Prompts per generation call: ``rollout.micro_batch_size`` on each of ``world_size`` ranks for the single-turn
    HF rollout (which generates that many at a time anyway), else the whole batch (``rollout``: its typed config).

    vLLM and the agent loops batch a whole call together (continuous batching, concurrent trajectories), and each
    call hands the weights over again, so cutting their generation would slow it down."""
    micro = rollout.micro_batch_size
    if rollout.name != "hf" or rollout.uses_agent_loops or not micro:
        return batch_size
    return min(batch_size, micro * world_size)


@dataclass
class _Chunk:
    first_id: int
    size: int
    future: concurrent.futures.Future
    submitted: float
    started: float = 0.0
    finished: float = 0.0


class RewardLoop:
    """Scores chunks of generated rows on one background thread as they are submitted; ``pending(ids)`` gives the
    reward of any rows (in any order) as a `PendingReward` that waits only for the chunks still being scored."""

    def __init__(self, reward_fn) -> None:
        self.reward_fn = reward_fn
        self._pool = concurrent.futures.ThreadPoolExecutor(max_workers=1, thread_name_prefix="reward-loop")
        self._chunks: list[_Chunk] = []
        self._next_id = 0
        self._lock = threading.Lock()

    def submit(self, rows: DataProto) -> np.ndarray:
        """Start scoring ``rows`` (a generated chunk, as the batch will hold it); returns their ids, which the caller
        stores in the ``ROW_KEY`` column."""
        with self._lock:
            first, self._next_id = self._next_id, self._next_id + len(rows)
        chunk = _Chunk(first, len(rows), None, time.monotonic())  # type: ignore[arg-type]

        def score():
            chunk.started = time.monotonic()
            try:
                return compute_reward(rows, self.reward_fn)
            finally:
                chunk.finished = time.monotonic()

        chunk.future = self._pool.submit(score)
        with self._lock:
            self._chunks.append(chunk)
        return np.arange(first, first + len(rows), dtype=np.int64)

    def generate(self, batch: DataProto, timing_raw: dict, generate_fn: Callable, chunk_prompts: int) -> DataProto:
        """``generate_fn(prompts, timing)`` (the trainer's one-call generation) on ``chunk_prompts`` prompts at a time,
        each chunk submitted for scoring as it returns; the chunks concatenated, with their ids in ``ROW_KEY``.
        Seconds the calls record in their own timing dicts are summed into ``timing_raw``."""
        outputs = []
        for index, start in enumerate(range(0, len(batch), chunk_prompts)):
            timing: dict = {}
            prompts = batch[start : start + chunk_prompts]
            # the rollout seeds each call from (seed, step, rank): the chunk index keeps the chunks' draws apart
            prompts.meta_info = {**prompts.meta_info, GENERATION_CHUNK: index}
            out = generate_fn(prompts, timing)
            out.meta_info.pop(GENERATION_CHUNK, None)
            for key, seconds in timing.items():
                timing_raw[key] = timing_raw.get(key, 0.0) + seconds
            out.non_tensor_batch[ROW_KEY] = self.submit(out)
            outputs.append(out)
        return outputs[0] if len(outputs) == 1 else DataProto.concat(outputs)

    def pending(self, ids) -> StreamedReward:
        """The reward of the rows ``ids`` (a ``ROW_KEY`` column), in that order; the chunks are forgotten here."""
        ids = np.asarray(ids, dtype=np.int64)
        with self._lock:
            wanted = [c for c in self._chunks if np.any((ids >= c.first_id) & (ids < c.first_id + c.size))]
            self._chunks = [c for c in self._chunks if c not in wanted]
        covered = sum(int(np.sum((ids >= c.first_id) & (ids < c.first_id + c.size))) for c in wanted)
        if covered != len(ids):
            raise KeyError(f"{len(ids) - covered} of {len(ids)} rows were not submitted to the reward loop")
        return StreamedReward(ids, wanted)

    def close(self) -> None:
        """Stop the scoring thread once what was submitted is scored."""
        self._pool.shutdown(wait=True)


class StreamedReward(PendingReward):
    """The reward of rows scored in chunks by a `RewardLoop`: ``result()`` waits for the chunks still running and
    gives ``(reward_tensor (bs, response_length), reward_extra_infos_dict)`` in the rows' order."""

    def __init__(self, ids: np.ndarray, chunks: list[_Chunk]) -> None:
        super().__init__()
        self._ids, self._chunks = ids, sorted(chunks, key=lambda c: c.first_id)
        self._waited_s = 0.0
        self._wait_started: float | None = None

    def result(self) -> tuple:
        if self._value is None:
            self._wait_started = time.monotonic()
            results = [c.future.result() for c in self._chunks]
            self._waited_s = time.monotonic() - self._wait_started
            self._value = self._assemble(results)
        return self._value

    def _assemble(self, results: list[tuple]) -> tuple:
        starts = np.array([c.first_id for c in self._chunks])
        which = np.searchsorted(starts, self._ids, side="right") - 1
        tensors = [r[0] for r in results]
        width = max(t.shape[-1] for t in tensors)
        reward = torch.zeros(len(self._ids), width, dtype=tensors[0].dtype)
        infos: list[dict] = []
        for row, (chunk_index, row_id) in enumerate(zip(which, self._ids, strict=True)):
            local = int(row_id - starts[chunk_index])
            tensor, extra = tensors[chunk_index], results[chunk_index][1] or {}
            reward[row, : tensor.shape[-1]] = tensor[local]
            infos.append({key: values[local] for key, values in extra.items()})
        return reward, merge_extra_info(infos)

    def metrics(self) -> dict[str, float]:
        """``reward_loop/*``: seconds spent scoring, how many of them before the trainer needed the rewards
        (overlap), seconds the trainer waited for the rest, and the number of chunks."""
        scoring = sum(c.finished - c.started for c in self._chunks)
        cutoff = self._wait_started if self._wait_started is not None else time.monotonic()
        overlap = sum(max(0.0, min(c.finished, cutoff) - c.started) for c in self._chunks)
        return {
            "reward_loop/scoring_s": scoring,
            "reward_loop/overlap_s": overlap,
            "reward_loop/wait_s": self._waited_s,
            "reward_loop/chunks": float(len(self._chunks)),
        }
