"""Run a reward function so that one that raises or hangs costs one sample a zero score, never the run."""

from __future__ import annotations

import logging
import multiprocessing
import signal
import threading
import traceback
from typing import Any

logger = logging.getLogger(__name__)

__all__ = ["GuardedCall", "DEFAULT_TIMEOUT_S"]

DEFAULT_TIMEOUT_S = 30.0


def _serve(fn, conn) -> None:
    """Helper-process loop: call ``fn(*args, **kwargs)`` per request, answer ``(ok, value or traceback text)``."""
    while True:
        try:
            args, kwargs = conn.recv()
        except (EOFError, OSError):
            return
        try:
            reply = (True, fn(*args, **kwargs))
        except BaseException:  # report every failure, the parent decides what it costs
            reply = (False, traceback.format_exc(limit=8))
        try:
            conn.send(reply)
        except Exception:  # e.g. an unpicklable result
            conn.send((False, traceback.format_exc(limit=4)))


class _Deadline(BaseException):
    """Raised inside the scorer by the alarm; a BaseException so a scorer's ``except Exception`` cannot swallow it."""


_MODES = ("auto", "signal", "process", "thread", "inline")


class GuardedCall:
    """Call ``fn`` with a deadline of ``timeout_s`` seconds per call; returns ``(ok, result, error_text)``.

    Modes:
    * ``signal`` (what ``auto`` picks on the main thread): ``SIGALRM`` interrupts the call in place, so busy loops
      and sleeps stop and side effects stay visible. A scorer that sets its own ``SIGALRM`` (math-verify does)
      replaces the deadline for that call with its own.
    * ``process``: ``fn`` runs in one forked helper process, reused across calls and killed and replaced when a
      call overruns, so even a hang inside C code stops. ``fn`` need not be picklable (fork copies it), but its
      arguments and result must be, and side effects on globals stay in the helper.
    * ``thread`` (what ``auto`` picks off the main thread): wait on a daemon thread; an overrunning call is
      abandoned, not stopped.
    * ``inline``, or ``timeout_s`` None or <= 0: call ``fn`` directly, failures still become ``ok=False``.
    """

    def __init__(self, fn, timeout_s: float | None = DEFAULT_TIMEOUT_S, mode: str = "auto"):
        if mode not in _MODES:
            raise ValueError(f"mode={mode!r} is not supported; expected one of {_MODES}")
        if mode == "process" and "fork" not in multiprocessing.get_all_start_methods():
            mode = "thread"
        if timeout_s is None or timeout_s <= 0:
            mode = "inline"
        self.fn = fn
        self.timeout_s = timeout_s
        self.mode = mode
        self._proc = None
        self._conn = None
        self._lock = threading.Lock()

    # A manager holding a GuardedCall may be pickled (e.g. sent to a Ray task); the helper process is not.
    def __getstate__(self) -> dict:
        state = self.__dict__.copy()
        state.update(_proc=None, _conn=None, _lock=None)
        return state

    def __setstate__(self, state: dict) -> None:
        self.__dict__.update(state)
        self._lock = threading.Lock()

    def __call__(self, *args, **kwargs) -> tuple[bool, Any, str | None]:
        """``(True, result, None)``, or ``(False, None, why)`` when ``fn`` raised, hung past the deadline or died."""
        if self.mode == "inline":
            try:
                return True, self.fn(*args, **kwargs), None
            except Exception:
                return False, None, traceback.format_exc(limit=8)
        mode = self.mode
        if mode == "auto":
            on_main = threading.current_thread() is threading.main_thread()
            mode = "signal" if on_main and hasattr(signal, "SIGALRM") else "thread"
        if mode == "signal":
            return self._call_with_alarm(args, kwargs)
        if mode == "thread":
            return self._call_in_thread(args, kwargs)
        with self._lock:
            return self._call_in_process(args, kwargs)

    def _call_with_alarm(self, args, kwargs):
        def on_alarm(signum, frame):
            raise _Deadline()

        timed_out = f"timed out after {self.timeout_s} s (interrupted)"
        try:
            previous = signal.signal(signal.SIGALRM, on_alarm)
            try:
                signal.setitimer(signal.ITIMER_REAL, self.timeout_s)
                try:
                    return True, self.fn(*args, **kwargs), None
                finally:
                    signal.setitimer(signal.ITIMER_REAL, 0)
            finally:
                signal.signal(signal.SIGALRM, previous)
        except _Deadline:  # also catches an alarm landing between the call's return and the disarm
            return False, None, timed_out
        except Exception:
            return False, None, traceback.format_exc(limit=8)

    def _call_in_thread(self, args, kwargs):
        box: dict = {}

        def target():
            try:
                box["result"] = self.fn(*args, **kwargs)
            except BaseException:
                box["error"] = traceback.format_exc(limit=8)

        worker = threading.Thread(target=target, daemon=True, name="verl-reward-call")
        worker.start()
        worker.join(self.timeout_s)
        if worker.is_alive():
            return False, None, f"timed out after {self.timeout_s} s (the call is abandoned in a daemon thread)"
        if "error" in box:
            return False, None, box["error"]
        return True, box.get("result"), None

    def _start(self) -> None:
        ctx = multiprocessing.get_context("fork")
        parent_conn, child_conn = ctx.Pipe()
        # fork passes fn to the child by memory, so it need not be picklable
        self._proc = ctx.Process(target=_serve, args=(self.fn, child_conn), daemon=True, name="verl-reward-call")
        self._proc.start()
        child_conn.close()
        self._conn = parent_conn

    def _call_in_process(self, args, kwargs):
        if self._proc is None or not self._proc.is_alive():
            self.close()
            self._start()
        try:
            self._conn.send((args, kwargs))
        except Exception:
            return False, None, "arguments could not be sent to the reward process:\n" + traceback.format_exc(limit=4)
        try:
            if self._conn.poll(self.timeout_s):
                ok, value = self._conn.recv()
                return (True, value, None) if ok else (False, None, value)
            reason = f"timed out after {self.timeout_s} s (the reward process was killed)"
        except (EOFError, OSError):
            reason = f"the reward process died (exit code {self._proc.exitcode})"
        self.close()
        return False, None, reason

    def close(self) -> None:
        """Kill the helper process, if any (a new one starts on the next call)."""
        if self._proc is not None:
            if self._proc.is_alive():
                self._proc.kill()
            self._proc.join(timeout=5)
            self._proc = None
        if self._conn is not None:
            self._conn.close()
            self._conn = None

    def __del__(self):
        try:
            self.close()
        except Exception:
            pass
