"""Run untrusted Python on this machine with limits: ``run_python(code, stdin, ...) -> SandboxResult``.

Every call gets a fresh interpreter (``python -I``, so no ``PYTHON*`` variable or user site applies) in a fresh
temporary directory that is removed afterwards, in a new session, with a minimal environment (nothing of the
parent's, so no token or credential reaches model-written code), stdin from an unlinked file, and stdout/stderr
drained by the parent and cut at ``max_output_chars``. The layers, in the order the child applies them
(``SandboxResult.layers`` names those that were in force for a run; ``isolation_layers()`` probes this machine):

1. Network namespace (``netns``; ``unshare(CLONE_NEWNET)``, needs root or unprivileged user namespaces): the program
   sees one loopback device that is down, so no TCP, UDP or raw traffic leaves it, 127.0.0.1 included.
   Cannot stop: Unix sockets named by a path, which live in the file system, not in the network namespace.
2. Landlock (``landlock-fs``, Linux >= 5.13): creating, writing, truncating, renaming or deleting files is allowed
   only beneath the temporary directory (and writing /dev/null); ``landlock-net`` (ABI >= 4) denies every TCP
   bind/connect; ``landlock-scope`` (ABI >= 6) denies signals to, and abstract sockets of, processes outside.
   Cannot stop: reading files (the program can read whatever this user can), writes through descriptors that
   were already open.
3. ``no_new_privs`` and, as root, an empty capability bounding set (``no_caps``): the interpreter that runs the
   program holds no capability, so it cannot raise its rlimits, leave its namespaces, mount or override file
   permissions. Cannot stop: uid 0 still owns root's files (Landlock is what keeps them unwritten).
4. rlimits, set before the interpreter that runs user code is exec'd: RLIMIT_CPU (CPU seconds), RLIMIT_AS (address
   space: allocations beyond ``memory_mb`` fail with MemoryError), RLIMIT_FSIZE (largest file), RLIMIT_CORE=0, and
   RLIMIT_NPROC for a non-root user (the kernel never enforces it for root). Cannot stop: memory outside the address
   space (page cache, kernel buffers), many files each under the size limit, a fork bomb run as root (layer 5 only).
5. An audit hook (``audit_hook``; ``sys.addaudithook``, installed before the program runs): refuses non-Unix
   sockets and socket connect/bind outside the directory, opening for writing (SQLite files too) and
   os.remove/rename/mkdir/chmod/... outside it, starting processes, signalling other processes, changing rlimits,
   and ctypes symbol lookup or raw memory access. The refused call raises ``PermissionError("sandbox: ... is
   blocked ...")``, so the program and the result (status ``blocked``) say clearly what happened. A tripwire, not
   a boundary: code that reaches C level (an extension module, ``_posixsubprocess``, a ctypes pointer already
   resolved) can get past it, which is why layers 1-3 exist where the kernel allows them.
6. The parent: a wall-clock timeout that SIGKILLs the whole process group (also right after the program exits,
   so nothing it started lingers). Cannot stop: a process that left the group with ``setsid`` (layer 5 refuses
   new processes, so one would first have to get past it).
"""

from __future__ import annotations

import functools
import json
import logging
import os
import selectors
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass

from verl.utils.sandbox.policy import check_isolation, minimum_from

__all__ = ["SandboxResult", "run_python", "isolation_layers", "ensure_isolation", "STATUSES"]

logger = logging.getLogger(__name__)

STATUSES = ("ok", "runtime_error", "timeout", "memory_error", "blocked", "sandbox_error")
_CHILD = os.path.join(os.path.dirname(os.path.abspath(__file__)), "_child.py")
_READ_CHUNK = 1 << 16
_REPORT_LIMIT = 4096
_EXIT_GRACE_S = 2.0  # how long to keep draining pipes after the group was killed


@dataclass(frozen=True)
class SandboxResult:
    """One run: ``status`` is one of STATUSES; ``exit_code`` is negative when a signal ended the program."""

    status: str
    stdout: str
    stderr: str
    exit_code: int | None
    duration: float
    truncated: bool = False
    layers: tuple[str, ...] = ()


class _Capture:
    """The first (with ``tail``, the last) ``limit`` bytes of a stream; the rest is read and dropped."""

    def __init__(self, limit: int, tail: bool = False):
        self.limit, self.tail, self.total, self.data = limit, tail, 0, bytearray()

    def add(self, chunk: bytes) -> None:
        self.total += len(chunk)
        if self.tail:
            self.data += chunk
            del self.data[: max(len(self.data) - self.limit, 0)]
        elif len(self.data) < self.limit:
            self.data += chunk[: self.limit - len(self.data)]

    def text(self, max_chars: int) -> tuple[str, bool]:
        text = self.data.decode("utf-8", errors="replace")
        cut = self.total > self.limit or len(text) > max_chars
        return (text[len(text) - max_chars :] if self.tail else text[:max_chars]), cut


def _check_positive(name: str, value: float) -> None:
    if not isinstance(value, int | float) or value <= 0:
        raise ValueError(f"run_python: {name}={value!r}; expected a positive number")


def _nproc_limit(extra: int) -> int | None:
    """RLIMIT_NPROC counts every task of the user, so the limit is what the user runs now plus ``extra``."""
    uid = os.geteuid()
    if uid == 0:
        return None  # never enforced for root, and a low value would only fail the exec itself
    count = 0
    for entry in os.scandir("/proc"):
        if entry.name.isdigit():
            try:
                if entry.stat().st_uid == uid:
                    count += len(os.listdir(f"/proc/{entry.name}/task"))
            except OSError:
                continue  # the process ended while we looked
    return count + extra


def _child_env(workdir: str) -> dict[str, str]:
    # one BLAS/OpenMP thread: per-thread buffers of numpy's BLAS would otherwise eat the address-space limit
    return {
        "PATH": "/usr/local/bin:/usr/bin:/bin",
        "HOME": workdir,
        "TMPDIR": workdir,
        "LANG": "C.UTF-8",
        "OMP_NUM_THREADS": "1",
        "OPENBLAS_NUM_THREADS": "1",
        "MKL_NUM_THREADS": "1",
    }


def _exited(pid: int) -> bool:
    """Whether the child has exited, without reaping it (its pid, and so its group id, stays reserved)."""
    try:
        return os.waitid(os.P_PID, pid, os.WEXITED | os.WNOHANG | os.WNOWAIT) is not None
    except ChildProcessError:
        return True


def _kill_group(pgid: int) -> None:
    try:
        os.killpg(pgid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass  # the group is already gone


def _drain(pid: int, captures: dict[int, _Capture], deadline: float) -> bool:
    """Read every pipe to EOF; SIGKILL the group at the deadline or once the child exits. True if it timed out."""
    timed_out, give_up_at = False, None
    with selectors.DefaultSelector() as selector:
        for fd in captures:
            selector.register(fd, selectors.EVENT_READ)
        while selector.get_map():
            now = time.monotonic()
            if give_up_at is None and (now >= deadline or _exited(pid)):
                timed_out = now >= deadline and not _exited(pid)
                _kill_group(pid)  # also ends whatever the program left running, which would hold the pipes open
                give_up_at = now + _EXIT_GRACE_S
            if give_up_at is not None and now >= give_up_at:
                break  # something outside the group holds a pipe; stop waiting for it
            wait = 0.05 if give_up_at is not None else min(0.05, max(deadline - now, 0.0))
            for key, _ in selector.select(timeout=wait):
                data = os.read(key.fd, _READ_CHUNK)
                if data:
                    captures[key.fd].add(data)
                else:
                    selector.unregister(key.fd)
    return timed_out


def _remove_tree(path: str) -> None:
    """Delete the work directory even if the program made parts of it unreadable."""
    for root, dirs, _ in os.walk(path):
        for name in dirs:
            full = os.path.join(root, name)
            if not os.path.islink(full):
                try:
                    os.chmod(full, 0o700)
                except OSError:
                    pass
    shutil.rmtree(path, ignore_errors=True)


def _classify(
    rc: int, timed_out: bool, notes: list[str], stderr: str, timeout_s: float, memory_mb: int, file_size_mb: int
) -> tuple[str, str]:
    """``(status, message for stderr)`` from how the child ended and what it reported."""
    blocked = [n[len("blocked ") :] for n in notes if n.startswith("blocked ")]
    if timed_out:
        return "timeout", f"sandbox: killed after the wall-clock limit of {timeout_s:g} s"
    if rc == -signal.SIGXCPU:
        return "timeout", f"sandbox: killed after the CPU-time limit of {timeout_s:g} s"
    if "memory_error" in notes or (rc != 0 and "MemoryError" in stderr):
        return "memory_error", f"sandbox: MemoryError: the program exceeded its memory limit of {memory_mb} MB"
    if blocked and rc != 0:
        return "blocked", f"sandbox: the program stopped at a blocked call: {blocked[0]}"
    if rc == 0:
        return "ok", ""
    if rc == -signal.SIGXFSZ:
        return "runtime_error", f"sandbox: a file exceeded the size limit of {file_size_mb} MB"
    if rc < 0:
        return "runtime_error", f"sandbox: killed by {signal.Signals(-rc).name}"
    return "runtime_error", ""


def run_python(
    code: str,
    stdin: str = "",
    timeout_s: float = 10.0,
    memory_mb: int = 1024,
    max_output_chars: int = 65536,
    *,
    file_size_mb: int = 64,
    max_processes: int = 64,
    guard: bool = True,
    min_isolation=None,
) -> SandboxResult:
    """Run ``code`` as ``__main__`` in a confined child interpreter fed ``stdin``; never raises for what it does.

    stdout keeps its first ``max_output_chars`` characters, stderr its last (then the sandbox's
    own message, if any). ``guard=False`` leaves out the audit hook (only the kernel layers and limits apply).
    Raises ``SandboxIsolationError`` (and runs nothing) when this machine gives less isolation than
    ``min_isolation`` (requirement names, see ``policy``; default ``$VERL_SANDBOX_MIN_ISOLATION`` or all four)."""
    ensure_isolation(min_isolation)
    return _run_program(code, stdin, timeout_s, memory_mb, max_output_chars, file_size_mb, max_processes, guard)


def _run_program(code, stdin, timeout_s, memory_mb, max_output_chars, file_size_mb, max_processes, guard):
    for name, value in (("timeout_s", timeout_s), ("memory_mb", memory_mb), ("file_size_mb", file_size_mb)):
        _check_positive(name, value)
    if not isinstance(max_output_chars, int) or max_output_chars < 0:
        raise ValueError(f"run_python: max_output_chars={max_output_chars!r}; expected an int >= 0")
    start = time.monotonic()
    workdir = tempfile.mkdtemp(prefix="verl-sandbox-")
    try:
        with open(os.path.join(workdir, "main.py"), "w", encoding="utf-8") as f:
            f.write(code)
        return _run_in(workdir, stdin, timeout_s, memory_mb, max_output_chars, file_size_mb, max_processes, guard)
    except OSError as e:  # could not even start the child (no fds, no processes, a full disk)
        message = f"sandbox: could not run the program: {e}"
        return SandboxResult("sandbox_error", "", message, None, time.monotonic() - start)
    finally:
        _remove_tree(workdir)


def _run_in(
    workdir: str,
    stdin: str,
    timeout_s: float,
    memory_mb: int,
    max_output_chars: int,
    file_size_mb: int,
    max_processes: int,
    guard: bool,
) -> SandboxResult:
    start = time.monotonic()
    report_r, report_w = os.pipe()
    cpu_s = int(timeout_s) + 1  # whole seconds; the wall-clock limit is the precise one
    run_stage = [sys.executable, "-I", "-B", "-X", "utf8", _CHILD, "run", workdir, str(report_w)]
    settings = {
        "workdir": workdir,
        "cpu_s": cpu_s,
        "memory_bytes": int(memory_mb) << 20,
        "file_bytes": int(file_size_mb) << 20,
        "nproc": _nproc_limit(max_processes),
        "exec": run_stage + ["guard" if guard else "noguard"],
    }
    try:
        with tempfile.TemporaryFile() as stdin_file:  # unlinked, so the program cannot find or change it
            stdin_file.write(stdin.encode("utf-8"))
            stdin_file.seek(0)
            proc = subprocess.Popen(
                [sys.executable, "-I", "-S", _CHILD, "confine", json.dumps(settings)],
                stdin=stdin_file,
                stdout=subprocess.PIPE,
                stderr=subprocess.PIPE,
                pass_fds=(report_w,),
                cwd=workdir,
                env=_child_env(workdir),
                start_new_session=True,  # its own process group, so the timeout kills everything it started
            )
    except BaseException:
        os.close(report_r)
        raise
    finally:
        os.close(report_w)
    limit = max_output_chars * 4  # bytes: a UTF-8 character takes at most four
    # stdout keeps its beginning, stderr its end: the end of a traceback is the part that explains the failure
    out, err, report = _Capture(limit), _Capture(limit, tail=True), _Capture(_REPORT_LIMIT)
    try:
        timed_out = _drain(
            proc.pid, {proc.stdout.fileno(): out, proc.stderr.fileno(): err, report_r: report}, start + timeout_s
        )
    finally:
        _kill_group(proc.pid)  # before reaping: until then the leader's pid, and so the group id, cannot be reused
        rc = proc.wait()
        proc.stdout.close()
        proc.stderr.close()
        os.close(report_r)
    stdout, out_cut = out.text(max_output_chars)
    stderr, err_cut = err.text(max_output_chars)
    notes = report.text(_REPORT_LIMIT)[0].splitlines()
    layers = next((n.split(" ", 1)[1] for n in notes if n.startswith("layers ")), "")
    status, message = _classify(rc, timed_out, notes, stderr, timeout_s, memory_mb, file_size_mb)
    if message:
        stderr += ("\n" if stderr and not stderr.endswith("\n") else "") + message + "\n"
    return SandboxResult(
        status=status,
        stdout=stdout,
        stderr=stderr,
        exit_code=rc,
        duration=time.monotonic() - start,
        truncated=out_cut or err_cut,
        layers=tuple(x for x in layers.split(",") if x),
    )


@functools.lru_cache(maxsize=1)
def isolation_layers() -> tuple[str, ...]:
    """The layers a run gets on this machine (probed once by running an empty program)."""
    layers = _run_program("pass", "", 30, 1024, 0, 64, 64, True).layers
    logger.warning("local sandbox: model-written code runs under these isolation layers here: %s", ", ".join(layers))
    return layers


def ensure_isolation(min_isolation=None) -> tuple[str, ...]:
    """The layers a run gets here; raises ``SandboxIsolationError`` naming what is missing from the minimum."""
    layers = isolation_layers()
    check_isolation(layers, minimum_from(min_isolation))
    return layers
