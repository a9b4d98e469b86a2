"""The Rollouter: a driver thread that keeps the standalone rollout generating into a bounded queue.

Each queue item is one mini-batch of prompts (``ppo_mini_batch_size`` of them, ``rollout.n`` responses each) with the
weight version that generated it. Generation and weight syncs exclude each other (``gen_lock``): a sync waits for the
mini-batch in flight to finish (no partial rollout yet), so every response of an item has one version.

Admission keeps the rollout from generating what would be dropped: an item may start with rollout version ``r``
only if the trainer will take it at a version ``<= r + staleness_threshold``, counting the items already queued.
Every wait polls a stop event, so ``stop()`` ends the thread within a poll interval plus the generation in flight.
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
    ):
        self.source, self.generate = source, generate
        self.version, self.trainer_position = version, trainer_position
        self.staleness_threshold, self.require_batches = staleness_threshold, require_batches
        self.worker_name = worker_name
        # bounded: what may be waiting when the trainer can still use it
        self.queue: queue.Queue = queue.Queue(maxsize=require_batches * (staleness_threshold + 1))
        self.gen_lock = threading.Lock()
        self.stop_event = threading.Event()
        self.error: BaseException | None = None
        self.generated = 0
        self._thread = threading.Thread(target=self._run, name="fully-async-rollouter", daemon=True)

    # ------------------------------------------------------------------------------------------------- control
    def start(self) -> None:
        self._thread.start()

    def stop(self, timeout_s: float = 60.0) -> None:
        """Stop generating and join the thread (raises if it is still running after ``timeout_s``)."""
        self.stop_event.set()
        self._thread.join(timeout_s)
        if self._thread.is_alive():
            raise TimeoutError(f"the Rollouter thread did not stop within {timeout_s:.0f} s (a generation hangs)")

    def is_alive(self) -> bool:
        return self._thread.is_alive()

    def admits(self, rollout_version: int) -> bool:
        """Whether an item generated now with ``rollout_version`` will be trained within the staleness bound: the
        trainer takes the queued items first, ``require_batches`` per update (version = updates done)."""
        trainer_version, taken = self.trainer_position()
        trained_at = trainer_version + (taken + self.queue.qsize()) // self.require_batches
        return trained_at - rollout_version <= self.staleness_threshold

    # ---------------------------------------------------------------------------------------------------- loop
    def _run(self) -> None:
        try:
            while not self.stop_event.is_set():
                with self.gen_lock:  # the dataloader advances only while no checkpoint reads its position
                    drawn = next(self.source, None)
                if drawn is None:
                    self._put(END)
                    return
                item = self._generate_admitted(*drawn)
                if item is None or not self._put(item):
                    return
        except BaseException as exc:  # noqa: BLE001 - handed to the trainer's thread, which raises it
            self.error = GenerationError(
                f"the Rollouter stopped: generation on the rollout worker group '{self.worker_name}' failed after "
                f"{self.generated} mini-batches: {type(exc).__name__}: {exc}"
            )
            self.error.__cause__ = exc

    def _generate_admitted(self, epoch: int, prompts: DataProto) -> RolloutItem | None:
        while not self.stop_event.is_set():
            with self.gen_lock:  # a sync cannot change the version between the check and the generation
                version = self.version()
                if self.admits(version):
                    started = time.perf_counter()
                    batch = self.generate(prompts, self.generated)
                    self.generated += 1
                    return RolloutItem(batch, version, epoch, started, time.perf_counter())
            self.stop_event.wait(POLL_S)
        return None

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
            try:
                return self.queue.get(timeout=POLL_S)
            except queue.Empty:
                pass
            if self.error is not None:
                raise self.error
            if not self._thread.is_alive():
                raise GenerationError(f"the Rollouter thread ended without data or error ({self.worker_name})")
            if time.monotonic() > deadline:
                raise TimeoutError(
                    f"no generated mini-batch from the rollout worker group '{self.worker_name}' within "
                    f"{timeout_s:.0f} s (trainer.watchdog_timeout_s)"
                )

    def acquire_for_sync(self, timeout_s: float) -> None:
        """Wait for the generation in flight to finish and hold the rollout (and the dataloader) idle, for a weight
        sync, a validation or a checkpoint; release with ``release``."""
        deadline = time.monotonic() + timeout_s
        while not self.gen_lock.acquire(timeout=POLL_S):
            if self.error is not None:
                raise self.error
            if time.monotonic() > deadline:
                raise TimeoutError(
                    f"the rollout worker group '{self.worker_name}' did not finish its generation within "
                    f"{timeout_s:.0f} s for a weight sync (trainer.watchdog_timeout_s)"
                )

    def release(self) -> None:
        self.gen_lock.release()
