"""Watchdog of worker-group calls: a deadline per phase, and every worker's stacks when one passes.

A phase is a registered worker method (``generate_sequences``, ``update_actor``, ``save_checkpoint``, ...). When a
group call with a deadline has not returned in time, the driver collects every worker's Python stacks (all threads,
through ``faulthandler``, so a worker blocked in C code, a collective or a sleep still answers), writes them under
``dump_dir/<phase>-<time>/rank_<r>.txt`` and raises :class:`WorkerGroupTimeout` naming the phase, the ranks that did
not return and the line each was on.

How a backend waits: the Ray group waits on the result references with a timeout and asks each worker's node (a
zero-CPU task pinned there) to send the worker ``STACK_SIGNAL``, whose ``faulthandler`` handler the worker installed
at start (:func:`install_stack_dump_handler`). The in-process group runs the call in the driver's main thread: a
timer thread dumps the stacks when the deadline passes and interrupts the call with ``INTERRUPT_SIGNAL``.
"""

from __future__ import annotations

import atexit
import faulthandler
import logging
import os
import re
import signal
import tempfile
import threading
import time
from contextlib import contextmanager
from dataclasses import dataclass, field

logger = logging.getLogger(__name__)

__all__ = [
    "STACK_SIGNAL",
    "Watchdog",
    "WorkerGroupTimeout",
    "WorkerLostError",
    "host_memory_summary",
    "install_stack_dump_handler",
    "memory_file_path",
    "memory_report",
    "stack_file_path",
    "start_memory_heartbeat",
    "where_stuck",
]

STACK_SIGNAL = getattr(signal, "SIGUSR1", None)
INTERRUPT_SIGNAL = getattr(signal, "SIGUSR2", None)
_FRAME = re.compile(r'^\s*File "(?P<file>[^"]+)", line (?P<line>\d+) in (?P<func>\S+)')
_installed_file = None
_heartbeat: threading.Thread | None = None
MEMORY_HEARTBEAT_S = 1.0


class WorkerGroupTimeout(TimeoutError):
    """A worker-group call outlived its phase's deadline; ``stuck`` maps each rank that did not return to its line."""

    def __init__(
        self, phase: str, timeout_s: float, stuck: dict[int | str, str], dump_dir: str | None, key: str
    ) -> None:
        def who(r):
            return f"rank {r}" if isinstance(r, int) else str(r)

        ranks = ", ".join(f"{who(r)} at {w}" for r, w in sorted(stuck.items(), key=str)) or "no rank identified"
        dumped = f"; the stacks are in {dump_dir}" if dump_dir else ""
        kind = "worker-group call" if all(isinstance(r, int) for r in stuck) else "driver phase"
        super().__init__(
            f"{kind} '{phase}' did not return within {timeout_s:g}s ({key}): {ranks}{dumped}. "
            f"If the phase is only slow, raise {key} (0 disables the deadline)"
        )
        self.phase, self.timeout_s, self.stuck, self.dump_dir = phase, timeout_s, stuck, dump_dir


class WorkerLostError(RuntimeError):
    """A worker process died during a group call (killed by the OS or Ray's memory monitor, or crashed)."""

    def __init__(self, role: str, phase: str, ranks: list[int], cause: str, memory: str, hints: list[str]) -> None:
        # memory: what :func:`memory_report` said on the lost worker's node (or the driver's host, when unknown)
        who = f"rank {', '.join(map(str, ranks))}" if ranks else "a worker"
        if any(word in cause.lower() for word in ("memory", "oom")):
            reason = "it was killed for memory (the OS's OOM killer or Ray's memory monitor)"
        else:
            reason = "the process died or was killed (the OS's OOM killer ends a process the same way)"
        lower = f" Settings that lower the memory of '{phase}': {', '.join(hints)}." if hints else ""
        super().__init__(
            f"{role} worker {who} was lost during '{phase}': {reason}. Memory {memory}.{lower} Ray said: {cause}"
        )
        self.role, self.phase, self.ranks, self.memory, self.hints = role, phase, ranks, memory, hints


def host_memory_summary() -> str:
    """``used X of Y GiB (Z%)`` of this host's memory."""
    try:
        import psutil

        vm = psutil.virtual_memory()
        total, available = vm.total, vm.available
    except ImportError:
        try:
            with open("/proc/meminfo") as f:
                info = {line.split(":")[0]: int(line.split()[1]) * 1024 for line in f}
            total, available = info["MemTotal"], info["MemAvailable"]
        except (OSError, KeyError, ValueError, IndexError):
            return "unknown"
    used = total - available
    gib = 1024**3
    return f"used {used / gib:.1f} of {total / gib:.1f} GiB ({100 * used / max(total, 1):.0f}%)"


def memory_file_path(pid: int | None = None) -> str:
    """Where the worker process ``pid`` keeps its last memory sample (:func:`start_memory_heartbeat`)."""
    return os.path.join(tempfile.gettempdir(), "verl_stacks", f"{os.getpid() if pid is None else pid}.mem.json")


def start_memory_heartbeat(interval_s: float = MEMORY_HEARTBEAT_S) -> str:
    """In a worker process: every ``interval_s`` write this host's memory and this process's resident memory to
    :func:`memory_file_path` (once per process), so that a worker killed for memory leaves a sample taken on its own
    node just before; the driver reads it there (:func:`memory_report`). Returns the file."""
    global _heartbeat
    path = memory_file_path()
    if _heartbeat is None:
        os.makedirs(os.path.dirname(path), exist_ok=True)
        remove_stale_files(os.path.dirname(path))
        _heartbeat = threading.Thread(target=_beat, args=(path, interval_s), name="verl-memory-heartbeat", daemon=True)
        _heartbeat.start()
        atexit.register(_remove_quietly, path)
    return path


def remove_stale_files(folder: str, older_than_s: float = 600.0) -> list[str]:
    """Remove what workers that ended without a report (``ray.kill``, the end of a cluster) left in ``folder``:
    heartbeat files not rewritten for ``older_than_s`` (a live worker's is rewritten every second) and stack files
    of processes no longer running on this host. Returns what was removed."""
    removed = []
    now = time.time()
    try:
        names = os.listdir(folder)
    except OSError:
        return removed
    for name in names:
        path = os.path.join(folder, name)
        try:
            if name.endswith(".mem.json"):
                stale = now - os.path.getmtime(path) > older_than_s
            else:
                stale = name.endswith(".txt") and name[:-4].isdigit() and not _running(int(name[:-4]))
            if stale:
                os.remove(path)
                removed.append(path)
        except OSError:  # another worker removed it first
            continue
    return removed


def _running(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # someone else's process
        return True
    return True


def _resident_bytes() -> int:
    try:
        with open("/proc/self/statm") as f:
            return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")
    except (OSError, ValueError, IndexError):
        return 0


def _beat(path: str, interval_s: float) -> None:
    import json
    import socket

    host = socket.gethostname()
    while True:
        sample = {"time": time.time(), "host": host, "memory": host_memory_summary(), "rss": _resident_bytes()}
        try:
            with open(path + ".tmp", "w") as f:
                json.dump(sample, f)
            os.replace(path + ".tmp", path)  # a reader never sees half a sample
        except OSError:
            pass
        time.sleep(interval_s)


def memory_report(pid: int, remove: bool = True) -> str:
    """Run on a worker's node: ``on <host>: used X of Y GiB (Z%) now; at the last sample of worker <pid>, Ns before
    it was lost: ... , its resident memory R GiB`` (the heartbeat's file is removed: its process is gone)."""
    import json
    import socket

    now = f"on {socket.gethostname()}: {host_memory_summary()} now"
    path = memory_file_path(pid)
    try:
        with open(path) as f:
            sample = json.load(f)
        if remove:
            _remove_quietly(path)
    except (OSError, ValueError):
        return f"{now} (no earlier sample of worker process {pid})"
    age = max(0.0, time.time() - sample["time"])
    return (
        f"{now}; at the last sample of worker process {pid}, {age:.1f}s before it was lost: {sample['memory']}, "
        f"the worker's resident memory {sample['rss'] / 1024**3:.2f} GiB"
    )


def stack_file_path(pid: int | None = None) -> str:
    """Where the worker process ``pid`` writes its stacks on ``STACK_SIGNAL`` (a per-host temp file)."""
    return os.path.join(tempfile.gettempdir(), "verl_stacks", f"{os.getpid() if pid is None else pid}.txt")


def install_stack_dump_handler() -> str | None:
    """In a worker process: dump all threads' stacks to :func:`stack_file_path` on ``STACK_SIGNAL`` (once per
    process); returns the file, or None where the platform has no such signal."""
    global _installed_file
    if STACK_SIGNAL is None:
        return None
    if _installed_file is None:
        path = stack_file_path()
        os.makedirs(os.path.dirname(path), exist_ok=True)
        remove_stale_files(os.path.dirname(path))
        _installed_file = open(path, "a")  # append: the driver empties it before each request
        faulthandler.register(STACK_SIGNAL, file=_installed_file, all_threads=True, chain=False)
        atexit.register(_remove_quietly, path)
    return _installed_file.name


def _remove_quietly(path: str) -> None:
    try:
        os.remove(path)
    except OSError:
        pass


def where_stuck(stacks: str, phase: str) -> str:
    """``file:line in func`` of the innermost frame of the thread running ``phase`` (else of the first thread)."""
    blocks, current = [], []
    for line in stacks.splitlines():
        match = _FRAME.match(line)
        if match:
            current.append(match)
        elif current:
            blocks.append(current)
            current = []
    if current:
        blocks.append(current)
    if not blocks:
        return "unknown line (no Python stack received)"
    chosen = next((b for b in blocks if any(m["func"] == phase for m in b)), blocks[0])
    top = chosen[0]
    return f"{top['file']}:{top['line']} in {top['func']}"


@dataclass
class Watchdog:
    """Deadlines of a worker group's calls: ``timeout_s`` for every phase, ``phase_timeout_s`` per method name
    (0 or less: no deadline); stacks go under ``dump_dir``. ``timeout_key`` names the setting in errors."""

    timeout_s: float = 0
    phase_timeout_s: dict[str, float] = field(default_factory=dict)
    dump_dir: str | None = None
    timeout_key: str = "trainer.watchdog_timeout_s"
    phase_key: str = "trainer.watchdog_phase_timeout_s"
    # per phase: the settings that lower its memory, named when a worker is lost during it
    memory_hints: dict[str, list[str]] = field(default_factory=dict)

    def deadline(self, phase: str) -> float:
        """Seconds the call ``phase`` may take (its own entry, else ``timeout_s``); 0: unlimited."""
        value = self.phase_timeout_s.get(phase)
        if value is None:
            value = self.timeout_s
        return float(value) if value and value > 0 else 0.0

    def key_for(self, phase: str) -> str:
        """The setting that gave ``phase`` its deadline."""
        return f"{self.phase_key}.{phase}" if self.phase_timeout_s.get(phase) is not None else self.timeout_key

    def write_dumps(self, phase: str, stacks: dict) -> str | None:
        """Write ``{rank: stacks text}`` under ``dump_dir/<phase>-<time>/``; returns the folder."""
        if not self.dump_dir:
            return None
        folder = os.path.join(self.dump_dir, f"{phase}-{time.strftime('%Y%m%d-%H%M%S')}")
        os.makedirs(folder, exist_ok=True)
        for rank, text in stacks.items():
            with open(os.path.join(folder, f"rank_{rank}.txt"), "w") as f:
                f.write(text)
        return folder

    def timed_out(self, phase: str, stuck_ranks: list, stacks: dict) -> WorkerGroupTimeout:
        """The error for ``phase`` with the stacks of every rank written out (``stuck_ranks`` did not return)."""
        folder = self.write_dumps(phase, stacks)
        stuck = {r: where_stuck(stacks.get(r, ""), phase) for r in stuck_ranks}
        error = WorkerGroupTimeout(phase, self.deadline(phase), stuck, folder, self.key_for(phase))
        logger.error("%s", error)
        return error

    @contextmanager
    def in_process(self, phase: str, who: int | str = 0):
        """Guard a call that runs in this process (``who``: rank 0 of an in-process group, or ``"driver"`` for the
        driver's own phases such as the reward): on the deadline, dump this process's stacks and interrupt the main
        thread with :class:`WorkerGroupTimeout`. Off the main thread the stacks are written and the error raised
        once the call returns."""
        timeout = self.deadline(phase)
        if not timeout:
            yield
            return
        on_main = threading.current_thread() is threading.main_thread() and INTERRUPT_SIGNAL is not None
        fired: list[WorkerGroupTimeout] = []
        caller = threading.get_ident()
        lock, done = threading.Lock(), []

        def expire():
            stacks = _dump_this_process()
            with lock:  # the call may have returned meanwhile: then no signal may reach a restored handler
                if done:
                    return
                fired.append(self.timed_out(phase, [who], {who: _prefer_thread(stacks, caller)}))
                if on_main:
                    signal.pthread_kill(caller, INTERRUPT_SIGNAL)

        def interrupt(signum, frame):
            if fired:  # a BaseException, so no `except Exception` in the interrupted code (a reward manager) eats it
                raise _Interrupted

        previous = signal.signal(INTERRUPT_SIGNAL, interrupt) if on_main else None
        timer = threading.Timer(timeout, expire)
        timer.daemon = True
        timer.start()
        try:
            yield
        except _Interrupted:
            raise fired[0] from None
        finally:
            with lock:
                done.append(True)
            timer.cancel()
            if on_main:
                signal.signal(INTERRUPT_SIGNAL, previous)
        if fired:
            raise fired[0]


class _Interrupted(BaseException):
    """Raised into the main thread when an in-process deadline passes; turned into WorkerGroupTimeout at the guard."""


def _dump_this_process() -> str:
    """All threads' stacks of this process, in faulthandler's format."""
    with tempfile.TemporaryFile("w+") as f:
        faulthandler.dump_traceback(file=f, all_threads=True)
        f.seek(0)
        return f.read()


def _prefer_thread(stacks: str, ident: int) -> str:
    """Put the block of thread ``ident`` first, so :func:`where_stuck` falls back to it."""
    marker = f"0x{ident:016x}"
    blocks = re.split(r"\n(?=(?:Current thread|Thread) 0x)", stacks)
    first = [b for b in blocks if marker in b.splitlines()[0]] if blocks else []
    return "\n".join(first + [b for b in blocks if b not in first])
