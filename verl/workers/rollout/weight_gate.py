"""Partial rollout's meeting point: a weight load pauses the generations in flight at a decode step, and they resume
under the new weights.

A standalone rollout worker that allows it (``async_training.partial_rollout``) receives weights on one thread while
another generates. :meth:`WeightGate.swap` raises the pause flag; each decode loop sees it after its current step
(``pause_requested``, read by the HF rollout's stopping criterion), returns the tokens it has and parks
(:meth:`WeightGate.park`); once no loop is running the weights load (the HF rollout's ``weights_released`` around
it), the version moves on, and the parked loops continue from their prompt plus the tokens they have, under the new
weights. Every token is tagged with the
``version`` in force when its decode loop (segment) started.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from contextlib import contextmanager

__all__ = ["WeightGate"]


class WeightGate:
    """Counts the decode loops running and lets :meth:`swap` run a weight load only while none is; ``version`` is
    the weights' current version, ``pauses`` how many decode loops a swap interrupted, ``steps`` the decode steps
    taken (for tests and metrics)."""

    def __init__(self, version: int = -1):
        self.version = version
        self.pauses = 0
        self.steps = 0
        self._cond = threading.Condition()
        self._swapping = False
        self._running = 0

    @property
    def pause_requested(self) -> bool:
        """Whether a swap waits: a decode loop should stop after its current step and :meth:`park`."""
        return self._swapping

    def step(self) -> bool:
        """Called once per decode step by a running loop; True when it should stop now (a swap waits)."""
        self.steps += 1
        return self._swapping

    @contextmanager
    def running(self):
        """Around one decode loop (a ``generate`` call): a loop does not start while a swap is loading."""
        with self._cond:
            self._cond.wait_for(lambda: not self._swapping)
            self._running += 1
        try:
            yield
        finally:
            with self._cond:
                self._running -= 1
                self._cond.notify_all()

    def park(self) -> int:
        """Called between two decode loops by a generation a swap interrupted (outside :meth:`running`): wait for the
        swap to finish; returns the new version."""
        with self._cond:
            self.pauses += 1
            self._cond.wait_for(lambda: not self._swapping)
            return self.version

    def swap(self, load: Callable[[], int], timeout_s: float = 600.0) -> int:
        """Pause every running decode loop, run ``load`` (returns the new version), then let them resume."""
        deadline = time.monotonic() + timeout_s
        with self._cond:
            # one swap at a time: a second waits for the first to finish
            self._cond.wait_for(lambda: not self._swapping, timeout=timeout_s)
            self._swapping = True
            if not self._cond.wait_for(lambda: self._running == 0, timeout=max(0.0, deadline - time.monotonic())):
                self._swapping = False
                self._cond.notify_all()
                raise TimeoutError(
                    f"the generations in flight did not pause for a weight load within {timeout_s:.0f} s"
                )
        version = None
        try:
            version = load()
        finally:
            with self._cond:
                if version is not None:
                    self.version = int(version)
                self._swapping = False
                self._cond.notify_all()
        return self.version
