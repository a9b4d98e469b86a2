"""verl's reward loop (``reward_model.use_reward_loop=True``): rewards computed as the responses finish.

Generated rows reach a background scoring thread in one of two ways, and are scored with the run's reward manager
while the rest of the batch still generates:

* per trajectory, with the agent loops (``rollout.mode=async`` or ``multi_turn``) and with vLLM: the rollout puts each
  finished trajectory (vLLM: each prompt's ``n`` samples, as the last of them finishes) in a sink that the trainer
  hands it in ``meta_info`` (a ``queue.Queue`` for the in-process worker group, a Ray ``Queue`` for Ray workers); the
  scoring thread merges each with its prompt's columns exactly as the trainer merges the whole output, and scores
  whatever has arrived together;
* per chunk, with the single-turn HF rollout: the trainer generates the batch ``rollout.micro_batch_size`` prompts per
  rank at a time (as HF would anyway) and hands over each chunk as it returns.

The trainer's reward phase then only records which rows it needs; the wait for what is still being scored happens
where the rewards are first read (the advantage phase), so scoring also overlaps the log-prob, reference and value
passes. Each row keeps a run-wide id in the ``reward_loop_row`` column from generation to the reward phase, so the
rewards come back in the batch's order after the rows were rebalanced across ranks. ``workers`` scoring threads
(``reward_model.num_workers``, verl's count of reward-loop workers): a free thread takes its share of what arrived
while it waited (all of it when there is one thread) and scores that in one call (an ``async`` reward function's
calls then run concurrently), so up to ``workers`` calls of the reward manager run at once.
"""

from __future__ import annotations

import concurrent.futures
import queue
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field

import numpy as np
import torch

from verl.protocol import DataProto
from verl.trainer.ppo.reward import PendingReward, compute_reward
from verl.workers.reward_manager.naive import merge_extra_info
from verl.workers.rollout.base import TRAJECTORY_ID, TRAJECTORY_SINK

__all__ = [
    "GENERATION_CHUNK",
    "ROW_KEY",
    "RewardLoop",
    "StreamedReward",
    "generation_chunk_prompts",
    "streams_trajectories",
]

# the run-wide id of a generated row, from generation to the reward phase (popped there); the rollouts' column name
ROW_KEY = TRAJECTORY_ID
# meta_info key of a chunk's index, read by pop_generation_inputs and the rollout worker's sampling seed
GENERATION_CHUNK = "generation_chunk"


def streams_trajectories(rollout) -> bool:
    """Whether the rollout (its typed config) hands each trajectory to the reward loop as it finishes: the agent
    loops (any engine) and vLLM's single-turn generation."""
    return rollout.uses_agent_loops or rollout.name == "vllm"


def generation_chunk_prompts(rollout, world_size: int, batch_size: int) -> int:
    """Prompts per generation call: ``rollout.micro_batch_size`` on each of ``world_size`` ranks for the single-turn
    HF rollout (which generates that many at a time anyway), else the whole batch (``rollout``: its typed config).

    vLLM and the agent loops batch a whole call together (continuous batching, concurrent trajectories) and hand
    each trajectory over as it finishes (`streams_trajectories`); each call hands the weights over again, so cutting
    their generation would only slow it down."""
    micro = rollout.micro_batch_size
    if rollout.name != "hf" or rollout.uses_agent_loops or not micro:
        return batch_size
    return min(batch_size, micro * world_size)


@dataclass(eq=False)
class _Chunk:
    """Rows scored in one call of the reward function."""

    ids: np.ndarray
    submitted: float
    future: concurrent.futures.Future = field(default_factory=concurrent.futures.Future)
    started: float = 0.0
    finished: float = 0.0


@dataclass(eq=False)
class _Stream:
    """One generation call whose trajectories arrive one by one: the prompts' rows (as the trainer holds them after
    the generation inputs were popped, and the popped inputs) and how the trainer merges rows with their prompts."""

    first_id: int
    n: int
    prompts: DataProto
    gen_prompts: DataProto
    merge: Callable[[DataProto, DataProto, DataProto], DataProto]
    generation_end: float | None = None

    def _inside(self, ids: np.ndarray) -> np.ndarray:
        return (ids >= self.first_id) & (ids < self.first_id + self.n * len(self.prompts))

    def holds(self, ids: np.ndarray) -> bool:
        """Whether all of ``ids`` are trajectories of this call."""
        return bool(np.all(self._inside(ids)))

    def overlaps(self, ids: np.ndarray) -> bool:
        """Whether any of ``ids`` is a trajectory of this call."""
        return bool(np.any(self._inside(ids)))

    def rows(self, ids: np.ndarray, generated: DataProto) -> DataProto:
        """``generated`` (the rollout's rows of trajectories ``ids``) merged with their prompts' columns."""
        prompt_index = (ids - self.first_id) // self.n
        return self.merge(self.prompts.select_idxs(prompt_index), self.gen_prompts.select_idxs(prompt_index), generated)


class RewardLoop:
    """Scores generated rows on ``workers`` background threads as they arrive; ``pending(ids)`` gives the reward of
    any rows (in any order) as a `PendingReward` that waits only for what is still being scored.

    ``remote``: the rollout runs in Ray workers, which reach the loop through a Ray ``Queue`` (made on first use)."""

    def __init__(self, reward_fn, remote: bool = False, workers: int = 1) -> None:
        if workers < 1:
            raise ValueError(f"the reward loop needs workers >= 1 (reward_model.num_workers), got {workers}")
        self.reward_fn = reward_fn
        self.remote = remote
        self.workers = workers
        self._inbox: queue.Queue = queue.Queue()
        self._ray_queue = None
        self._chunks: list[_Chunk] = []
        self._streams: list[_Stream] = []
        self._next_id = 0
        self._lock = threading.Lock()
        self._arrived = threading.Condition(self._lock)
        self._closed = False
        self._scorers: list[threading.Thread] = []
        self._forwarder: threading.Thread | None = None

    # -------------------------------------------------------------------------------------------- what is scored
    def begin_step(self) -> None:
        """A new training step: the reward manager prints its ``num_examine`` samples per data source once per step,
        not once per scored group (the managers read ``examined_per_step``)."""
        sources = getattr(self.reward_fn, "sources", None) or []  # a hybrid reward's managers print their own
        for manager in [self.reward_fn] + [getattr(source, "manager", None) for source in sources]:
            if hasattr(manager, "num_examine"):
                manager.examined_per_step = {}

    def _reserve(self, count: int) -> int:
        with self._lock:
            first, self._next_id = self._next_id, self._next_id + count
        return first

    def submit(self, rows: DataProto) -> np.ndarray:
        """Start scoring ``rows`` (a generated chunk, as the batch will hold it); returns their ids, which the caller
        stores in the ``ROW_KEY`` column."""
        first = self._reserve(len(rows))
        ids = np.arange(first, first + len(rows), dtype=np.int64)
        self._register(_Chunk(ids, time.monotonic()), rows)
        return ids

    def generate(self, batch: DataProto, timing_raw: dict, generate_fn: Callable, chunk_prompts: int) -> DataProto:
        """``generate_fn(prompts, timing)`` (the trainer's one-call generation) on ``chunk_prompts`` prompts at a time,
        each chunk submitted for scoring as it returns; the chunks concatenated, with their ids in ``ROW_KEY``.
        Seconds the calls record in their own timing dicts are summed into ``timing_raw``."""
        self.begin_step()
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

    def open_stream(self, prompts: DataProto, gen_prompts: DataProto, n: int, merge: Callable) -> np.ndarray:
        """Prepare one generation call whose rollout hands over each trajectory as it finishes: ``prompts`` are the
        trainer's rows of the prompts (generation inputs popped), ``gen_prompts`` the popped inputs, which get the
        rollout's ``TRAJECTORY_ID`` column and ``TRAJECTORY_SINK``; ``merge(prompt_rows, gen_rows, generated)`` is
        how the trainer merges generated rows (one per prompt row given) with their prompts. Returns the ids of the
        ``n`` trajectories of every prompt, in the order the rollout's output holds them (interleaved)."""
        self.begin_step()
        first = self._reserve(n * len(prompts))
        stream = _Stream(first, n, _snapshot(prompts), _snapshot(gen_prompts), merge)
        with self._lock:
            self._streams.append(stream)
        gen_prompts.non_tensor_batch[TRAJECTORY_ID] = first + n * np.arange(len(prompts), dtype=np.int64)
        gen_prompts.meta_info[TRAJECTORY_SINK] = self._sink()
        self._start()
        return np.arange(first, first + n * len(prompts), dtype=np.int64)

    def close_stream(self, gen_prompts: DataProto) -> None:
        """The generation call of ``gen_prompts`` returned: everything it generated is in the sink."""
        gen_prompts.meta_info.pop(TRAJECTORY_SINK, None)
        first = int(gen_prompts.non_tensor_batch.pop(TRAJECTORY_ID)[0]) if len(gen_prompts) else -1
        with self._lock:
            for stream in self._streams:
                if stream.first_id == first:
                    stream.generation_end = time.monotonic()

    def _sink(self):
        if not self.remote:
            return self._inbox
        if self._ray_queue is None:
            from ray.util.queue import Queue

            self._ray_queue = Queue(actor_options={"num_cpus": 0})
            self._forwarder = threading.Thread(target=self._forward, name="reward-loop-forward", daemon=True)
            self._forwarder.start()
        return self._ray_queue

    # ------------------------------------------------------------------------------------------- scoring thread
    def _register(self, chunk: _Chunk, rows: DataProto | None) -> None:
        with self._arrived:
            self._chunks.append(chunk)
            self._arrived.notify_all()
        self._start()
        self._inbox.put((chunk, rows))

    def _start(self) -> None:
        with self._lock:
            if self._scorers:
                return
            self._scorers = [
                threading.Thread(target=self._run, name=f"reward-loop-{i}", daemon=True) for i in range(self.workers)
            ]
            for thread in self._scorers:
                thread.start()

    def _forward(self) -> None:
        """Move the Ray workers' trajectories into the local inbox."""
        from ray.util.queue import Empty

        while not self._closed:
            try:
                self._inbox.put(self._ray_queue.get(block=True, timeout=0.5))
            except Empty:
                continue
            except Exception:  # Ray shut down under us: nothing more will arrive
                if not self._closed:
                    raise
                return

    def _run(self) -> None:
        while True:
            items = [self._inbox.get()]
            # what else arrived meanwhile is scored with it: all of it with one thread, else this thread's share, so
            # that the other threads get theirs
            share = -(-(1 + self._inbox.qsize()) // self.workers)
            while len(items) < share:
                try:
                    items.append(self._inbox.get_nowait())
                except queue.Empty:
                    break
            if any(item is None for item in items):
                self._inbox.put(None)  # the stop goes on to the next thread
                return
            chunks: list[tuple[_Chunk, DataProto | None]] = []
            trajectories: list[tuple[np.ndarray, DataProto]] = []
            for item in items:
                (chunks if isinstance(item[0], _Chunk) else trajectories).append(item)
            if trajectories:
                chunks.append(self._trajectories_chunk(trajectories))
            for chunk, rows in chunks:
                self._score(chunk, rows)

    def _trajectories_chunk(self, trajectories: list) -> tuple[_Chunk, DataProto | None]:
        """One chunk for trajectories handed over by a rollout, merged with their prompts' columns."""
        ids = np.concatenate([ids for ids, _ in trajectories]).astype(np.int64)
        chunk = _Chunk(ids, time.monotonic())
        try:
            with self._lock:
                streams = list(self._streams)
            merged = []
            for trajectory_ids, generated in trajectories:
                stream = next((s for s in streams if s.holds(trajectory_ids)), None)
                if stream is None:
                    raise KeyError(f"trajectories {trajectory_ids.tolist()} belong to no open generation call")
                merged.append(stream.rows(trajectory_ids, generated))
            rows = merged[0] if len(merged) == 1 else DataProto.concat(merged)
        except Exception as e:  # the trainer sees it where it reads these rewards
            chunk.future.set_exception(e)
            rows = None
        with self._arrived:
            self._chunks.append(chunk)
            self._arrived.notify_all()
        return chunk, rows

    def _score(self, chunk: _Chunk, rows: DataProto | None) -> None:
        if chunk.future.done():  # failed before scoring
            return
        chunk.started = time.monotonic()
        try:
            chunk.future.set_result(compute_reward(rows, self.reward_fn))
        except Exception as e:
            chunk.future.set_exception(e)
        finally:
            chunk.finished = time.monotonic()

    # ------------------------------------------------------------------------------------------------ results
    def pending(self, ids) -> StreamedReward:
        """The reward of the rows ``ids`` (a ``ROW_KEY`` column), in that order."""
        ids = np.asarray(ids, dtype=np.int64)
        unknown = int(np.sum((ids < 0) | (ids >= self._next_id)))
        if unknown:
            raise KeyError(f"{unknown} of {len(ids)} rows were not submitted to the reward loop")
        return StreamedReward(ids, self)

    def _take(self, ids: np.ndarray) -> tuple[list[_Chunk], float | None]:
        """Wait until every row of ``ids`` is in a chunk, then forget those chunks (and their generation calls);
        returns the chunks and when the last of those calls returned (None for chunked generation)."""
        wanted = set(ids.tolist())
        with self._arrived:
            while True:
                chunks = [c for c in self._chunks if not wanted.isdisjoint(c.ids.tolist())]
                if sum(len(wanted.intersection(c.ids.tolist())) for c in chunks) == len(wanted):
                    break
                if not any(thread.is_alive() for thread in self._scorers):
                    raise RuntimeError("the reward loop's scoring thread stopped before these rows arrived")
                self._arrived.wait(timeout=1.0)
            self._chunks = [c for c in self._chunks if c not in chunks]
            streams = [
                s for s in self._streams if np.any((ids >= s.first_id) & (ids < s.first_id + s.n * len(s.prompts)))
            ]
            self._streams = [s for s in self._streams if s not in streams]
        ends = [s.generation_end for s in streams if s.generation_end is not None]
        return chunks, (max(ends) if ends else None)

    def close(self) -> None:
        """Stop the scoring threads once what was submitted is scored."""
        self._closed = True
        self._inbox.put(None)
        for thread in (*self._scorers, self._forwarder):
            if thread is not None:
                thread.join(timeout=5.0)
        self._scorers, self._forwarder = [], None
        if self._ray_queue is not None:
            self._ray_queue.shutdown()
            self._ray_queue = None


def _snapshot(data: DataProto) -> DataProto:
    """Rows of ``data`` that the trainer may change afterwards (columns added, rows repeated) copied aside."""
    copy = data.select_idxs(np.arange(len(data)))
    copy.meta_info = dict(data.meta_info)
    return copy


class StreamedReward(PendingReward):
    """The reward of rows scored by a `RewardLoop`: ``result()`` waits for the rows still being scored and gives
    ``(reward_tensor (bs, response_length), reward_extra_infos_dict)`` in the rows' order."""

    def __init__(self, ids: np.ndarray, loop: RewardLoop) -> None:
        super().__init__()
        self._ids, self._loop = ids, loop
        self._chunks: list[_Chunk] = []
        self._generation_end: float | None = None
        self._waited_s = 0.0
        self._wait_started: float | None = None

    def result(self) -> tuple:
        if self._value is None:
            self._wait_started = time.monotonic()
            self._chunks, self._generation_end = self._loop._take(self._ids)
            results = [c.future.result() for c in self._chunks]
            self._waited_s = time.monotonic() - self._wait_started
            self._value = self._assemble(results)
        return self._value

    def _assemble(self, results: list[tuple]) -> tuple:
        where = {
            int(row_id): (index, local) for index, c in enumerate(self._chunks) for local, row_id in enumerate(c.ids)
        }
        tensors = [r[0] for r in results]
        width = max(t.shape[-1] for t in tensors)
        reward = torch.zeros(len(self._ids), width, dtype=tensors[0].dtype)
        infos: list[dict] = []
        for row, row_id in enumerate(self._ids.tolist()):
            chunk_index, local = where[row_id]
            tensor, extra = tensors[chunk_index], results[chunk_index][1] or {}
            reward[row, : tensor.shape[-1]] = tensor[local]
            infos.append({key: values[local] for key, values in extra.items()})
        return reward, merge_extra_info(infos)

    def metrics(self) -> dict[str, float]:
        """``reward_loop/*``: seconds spent scoring, how many of them before the trainer needed the rewards
        (overlap), seconds the trainer waited for the rest, the number of scoring calls (chunks), and, where the
        rollout hands over trajectories one by one, the rows whose scoring started before generation returned."""
        self.result()
        chunks = self._chunks
        scoring = sum(c.finished - c.started for c in chunks)
        cutoff = self._wait_started if self._wait_started is not None else time.monotonic()
        overlap = sum(max(0.0, min(c.finished, cutoff) - c.started) for c in chunks)
        metrics = {
            "reward_loop/scoring_s": scoring,
            "reward_loop/overlap_s": overlap,
            "reward_loop/wait_s": self._waited_s,
            "reward_loop/chunks": float(len(chunks)),
        }
        if self._generation_end is not None:
            early = sum(len(c.ids) for c in chunks if c.started < self._generation_end)
            metrics["reward_loop/scored_during_generation"] = float(early)
        return metrics
