"""The Rollouter: a driver thread that keeps the standalone rollout generating into a bounded queue.

Each queue item is one mini-batch of prompts (``ppo_mini_batch_size`` of them, ``rollout.n`` responses each) with the
weight version that generated it. Up to ``max_in_flight`` mini-batches generate at once, each on a thread of its own
(the rollout serves their trajectories together, so one batch's decoding fills the time another's wait on tools);
items reach the queue in the order they finish. Without partial rollout a weight sync waits for every generation in
flight to finish (``acquire_for_sync``) and holds new ones back, so every response of an item has one version.

Admission keeps the rollout from generating what would be dropped: an item may start with rollout version ``r``
only if the trainer will take it at a version ``<= r + staleness_threshold``, counting the items already queued and
in flight. Every wait polls a stop event, so ``stop()`` ends the threads within a poll interval plus the
generations in flight.
"""

from __future__ import annotations

import queue
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass

from verl import DataProto

__all__ = ["END", "GenerationError", "Rollouter", "RolloutItem"]

POLL_S = 0.05


@dataclass
class RolloutItem:
    """One generated mini-batch: the merged ``batch`` (prompts x n responses), the weight ``version`` that
    generated it, its ``epoch``, and the driver-clock ``started`` / ``finished`` seconds of its generation."""

    batch: DataProto
    version: int
    epoch: int
    started: float
    finished: float


END = object()  # queued once the data is exhausted


class GenerationError(RuntimeError):
    """The Rollouter's generation failed (a dead or failing rollout worker); raised in the trainer's thread."""


class Rollouter:
    """Generates mini-batches from ``source`` (``(epoch, DataProto of prompts)`` pairs) with ``generate(prompts,
    index) -> merged batch`` into ``self.queue``; ``version()`` is the rollout's current weight version and
    ``trainer_position()`` the trainer's ``(version, items taken for its current update)``."""

    def __init__(
        self,
        source: Iterator,
        generate: Callable[[DataProto, int], DataProto],
        version: Callable[[], int],
        trainer_position: Callable[[], tuple[int, int]],
        staleness_threshold: int,
        require_batches: int,
        worker_name: str = "rollout",
        max_in_flight: int = 1,
    ):
        self.source, self.generate = source, generate
        self.version, self.trainer_position = version, trainer_position
        self.staleness_threshold, self.require_batches = staleness_threshold, require_batches
        self.worker_name = worker_name
        self.max_in_flight = max(1, int(max_in_flight))
        # bounded: what may be waiting when the trainer can still use it
        self.queue: queue.Queue = queue.Queue(maxsize=require_batches * (staleness_threshold + 1))
        # guards in_flight, paused and the dataloader's position
        self._cond = threading.Condition()
        self.in_flight = 0  # mini-batches generating
        self._handing = 0  # generated, being queued
        self._paused = False
        self.stop_event = threading.Event()
        self.error: BaseException | None = None
        self.generated = 0  # mini-batches finished
        self._started = 0  # mini-batches whose generation started (their index)
        self._workers: list[threading.Thread] = []
        self._thread = threading.Thread(target=self._run, name="fully-async-rollouter", daemon=True)

    # ------------------------------------------------------------------------------------------------- control
    def start(self) -> None:
        self._thread.start()

    def stop(self, timeout_s: float = 60.0) -> None:
        """Stop generating and join the threads (raises if one is still running after ``timeout_s``)."""
        self.stop_event.set()
        deadline = time.monotonic() + timeout_s
        for thread in [self._thread, *self._workers]:
            thread.join(max(0.0, deadline - time.monotonic()))
            if thread.is_alive():
                raise TimeoutError(f"the Rollouter thread did not stop within {timeout_s:.0f} s (a generation hangs)")

    def is_alive(self) -> bool:
        return self._thread.is_alive()

    def admits(self, rollout_version: int) -> bool:
        """Whether an item generated now with ``rollout_version`` will be trained within the staleness bound: the
        trainer takes the queued and in-flight items first, ``require_batches`` per update (version = updates
        done)."""
        trainer_version, taken = self.trainer_position()
        ahead = taken + self.queue.qsize() + self.in_flight + self._handing
        return trainer_version + ahead // self.require_batches - rollout_version <= self.staleness_threshold

    # ---------------------------------------------------------------------------------------------------- loop
    def _run(self) -> None:
        try:
            while not self.stop_event.is_set():
                with self._cond:  # the dataloader advances only while no checkpoint reads its position
                    if not self._wait(lambda: not self._paused):
                        return
                    drawn = next(self.source, None)
                if drawn is None:
                    with self._cond:
                        if not self._wait(lambda: self.in_flight + self._handing == 0):
                            return
                    if self.error is None:
                        self._put(END)
                    return
                if not self._start_admitted(*drawn):
                    return
        except BaseException as exc:  # noqa: BLE001 - handed to the trainer's thread, which raises it
            self._fail(exc, self._started)

    def _wait(self, ready: Callable[[], bool]) -> bool:
        """Wait (holding ``_cond``) until ``ready()``; False when stopped or failed meanwhile."""
        while not ready():
            if self.stop_event.is_set() or self.error is not None:
                return False
            self._cond.wait(POLL_S)
        return not self.stop_event.is_set() and self.error is None

    def _start_admitted(self, epoch: int, prompts: DataProto) -> bool:
        """Start the generation of ``prompts`` once the staleness bound admits it and a slot is free."""
        with self._cond:  # a sync cannot change the version between the check and the start
            admitted = self._wait(
                lambda: not self._paused and self.in_flight < self.max_in_flight and self.admits(self.version())
            )
            if not admitted:
                return False
            version, index = self.version(), self._started
            self._started += 1
            self.in_flight += 1
        worker = threading.Thread(
            target=self._generate_one, args=(prompts, index, version, epoch), name="fully-async-generation", daemon=True
        )
        self._workers = [t for t in self._workers if t.is_alive()] + [worker]
        worker.start()
        return True

    def _generate_one(self, prompts: DataProto, index: int, version: int, epoch: int) -> None:
        item = None
        try:
            started = time.perf_counter()
            batch = self.generate(prompts, index)
            item = RolloutItem(batch, version, epoch, started, time.perf_counter())
        except BaseException as exc:  # noqa: BLE001 - handed to the trainer's thread, which raises it
            self._fail(exc, index)
        finally:
            with self._cond:
                # generated: a sync no longer waits for it, admission still counts it until it is queued
                self.in_flight -= 1
                self._handing += item is not None
                self._cond.notify_all()
        if item is not None:
            self._put(item)  # may wait for the trainer (a full queue) while a sync runs
            with self._cond:
                self._handing -= 1
                self.generated += 1
                self._cond.notify_all()

    def _fail(self, exc: BaseException, index: int) -> None:
        with self._cond:
            if self.error is not None:
                return
            self.error = GenerationError(
                f"the Rollouter stopped: generation on the rollout worker group '{self.worker_name}' failed after "
                f"{index} mini-batches: {type(exc).__name__}: {exc}"
            )
            self.error.__cause__ = exc
            self._cond.notify_all()

    def _put(self, item) -> bool:
        while not self.stop_event.is_set():
            try:
                self.queue.put(item, timeout=POLL_S)
                return True
            except queue.Full:
                continue
        return False

    def get(self, timeout_s: float):
        """The next item (or ``END``) for the trainer; raises the Rollouter's error, or ``TimeoutError``."""
        deadline = time.monotonic() + timeout_s
        while True:
            if self.error is not None:
                raise self.error
            try:
                return self.queue.get(timeout=POLL_S)
            except queue.Empty:
                pass
            if not self._thread.is_alive() and self.in_flight + self._handing == 0 and self.queue.empty():
                raise GenerationError(f"the Rollouter thread ended without data or error ({self.worker_name})")
            if time.monotonic() > deadline:
                raise TimeoutError(
                    f"no generated mini-batch from the rollout worker group '{self.worker_name}' within "
                    f"{timeout_s:.0f} s (trainer.watchdog_timeout_s)"
                )

    def acquire_for_sync(self, timeout_s: float) -> None:
        """Wait for the generations in flight to finish and hold the rollout (and the dataloader) idle, for a weight
        sync or a checkpoint; release with ``release``."""
        deadline = time.monotonic() + timeout_s
        with self._cond:
            self._paused = True
            while self.in_flight:
                if self.error is not None:
                    self._paused = False
                    raise self.error
                if time.monotonic() > deadline:
                    self._paused = False
                    raise TimeoutError(
                        f"the rollout worker group '{self.worker_name}' did not finish its generations within "
                        f"{timeout_s:.0f} s for a weight sync (trainer.watchdog_timeout_s)"
                    )
                self._cond.wait(POLL_S)

    def release(self) -> None:
        with self._cond:
            self._paused = False
            self._cond.notify_all()
