"""The sandbox's child side: a standalone script (standard library only), never imported by verl.

It runs in two stages in the same process, both started by ``verl.utils.sandbox.local``:

``python -I -S _child.py confine <settings json>``
    applies the kernel layers (network namespace, Landlock, dropped capabilities, no_new_privs, rlimits) and then
    ``execve``s the second stage, so every limit is in force before the interpreter that runs user code starts.
``python -I -B -X utf8 _child.py run <workdir> <report fd> <guard|noguard> <layers>``
    installs the audit-hook guard, then runs ``<workdir>/main.py`` as ``__main__``.

The report fd carries one-line notes back to the parent (``layers ...``, ``blocked ...``, ``memory_error``), so the
parent can tell a refused call or a MemoryError from an ordinary failure without parsing (possibly truncated) stderr.
"""

import json
import os
import sys

# linux/landlock.h
_LANDLOCK_CREATE_RULESET_VERSION = 1
_LANDLOCK_RULE_PATH_BENEATH = 1
_FS_WRITE_FILE = 1 << 1
_FS_REMOVE_DIR, _FS_REMOVE_FILE = 1 << 4, 1 << 5
_FS_MAKE_ALL = sum(1 << bit for bit in range(6, 13))  # char, dir, reg, sock, fifo, block, sym
_FS_REFER, _FS_TRUNCATE = 1 << 13, 1 << 14  # ABI 2, ABI 3
_NET_BIND_TCP, _NET_CONNECT_TCP = 1 << 0, 1 << 1  # ABI 4
_SCOPE_ABSTRACT_UNIX_SOCKET, _SCOPE_SIGNAL = 1 << 0, 1 << 1  # ABI 6
# the three landlock syscalls have the same numbers on every architecture (they postdate the unified table)
_SYS_CREATE_RULESET, _SYS_ADD_RULE, _SYS_RESTRICT_SELF = 444, 445, 446
_CLONE_NEWUSER, _CLONE_NEWNET = 0x10000000, 0x40000000
_PR_CAPBSET_DROP, _PR_SET_NO_NEW_PRIVS = 24, 38


def _libc():
    import ctypes

    libc = ctypes.CDLL(None, use_errno=True)
    libc.syscall.restype = ctypes.c_long
    return ctypes, libc


def _new_network_namespace(libc) -> bool:
    """An empty network namespace: only a loopback device that is down, so no address is reachable."""
    if libc.unshare(_CLONE_NEWNET) == 0:
        return True
    # without CAP_SYS_ADMIN a user namespace may still be allowed; map our own ids so files keep their owner
    uid, gid = os.geteuid(), os.getegid()
    if libc.unshare(_CLONE_NEWUSER | _CLONE_NEWNET) != 0:
        return False
    try:
        for path, text in (("/proc/self/setgroups", "deny"), ("/proc/self/uid_map", f"{uid} {uid} 1")):
            with open(path, "w") as f:
                f.write(text)
        with open("/proc/self/gid_map", "w") as f:
            f.write(f"{gid} {gid} 1")
    except OSError:
        pass  # the namespace still isolates the network; files created inside may show up as nobody's
    return True


def _landlock(ctypes, libc, workdir: str) -> list:
    """Forbid writes outside ``workdir`` (and TCP bind/connect, signals and abstract sockets where the ABI has them)."""
    abi = libc.syscall(_SYS_CREATE_RULESET, None, ctypes.c_size_t(0), ctypes.c_uint32(_LANDLOCK_CREATE_RULESET_VERSION))
    if abi < 1:
        return []
    fs = _FS_WRITE_FILE | _FS_REMOVE_DIR | _FS_REMOVE_FILE | _FS_MAKE_ALL
    fs |= _FS_REFER if abi >= 2 else 0
    fs |= _FS_TRUNCATE if abi >= 3 else 0
    fields = [fs]
    if abi >= 4:
        fields.append(_NET_BIND_TCP | _NET_CONNECT_TCP)  # handled with no rule: every TCP bind/connect is denied
    if abi >= 6:
        fields.append(_SCOPE_ABSTRACT_UNIX_SOCKET | _SCOPE_SIGNAL)
    attr = (ctypes.c_uint64 * len(fields))(*fields)
    ruleset = libc.syscall(_SYS_CREATE_RULESET, ctypes.byref(attr), ctypes.c_size_t(ctypes.sizeof(attr)), 0)
    if ruleset < 0:
        return []

    class PathBeneath(ctypes.Structure):
        _pack_ = 1
        _fields_ = [("allowed_access", ctypes.c_uint64), ("parent_fd", ctypes.c_int32)]

    file_rights = _FS_WRITE_FILE | (_FS_TRUNCATE if abi >= 3 else 0)  # a rule on a file takes file rights only
    for path, rights in ((workdir, fs), ("/dev/null", file_rights)):
        fd = os.open(path, os.O_PATH | os.O_CLOEXEC)
        rule = PathBeneath(rights, fd)
        libc.syscall(_SYS_ADD_RULE, ruleset, _LANDLOCK_RULE_PATH_BENEATH, ctypes.byref(rule), 0)
        os.close(fd)
    if libc.syscall(_SYS_RESTRICT_SELF, ruleset, 0) != 0:
        return []
    layers = ["landlock-fs"]
    layers += ["landlock-net"] if abi >= 4 else []
    layers += ["landlock-scope"] if abi >= 6 else []
    return layers


def _drop_capabilities(libc) -> bool:
    """Empty the bounding set, so the exec'd interpreter runs without capabilities even as root."""
    try:
        with open("/proc/sys/kernel/cap_last_cap") as f:
            last = int(f.read())
    except (OSError, ValueError):
        return False
    return all(libc.prctl(_PR_CAPBSET_DROP, cap, 0, 0, 0) == 0 for cap in range(last + 1))


def _rlimits(settings: dict) -> None:
    import resource

    limits = {
        resource.RLIMIT_CPU: (settings["cpu_s"], settings["cpu_s"] + 1),  # SIGXCPU at the soft limit, SIGKILL after
        resource.RLIMIT_AS: (settings["memory_bytes"],) * 2,
        resource.RLIMIT_FSIZE: (settings["file_bytes"],) * 2,
        resource.RLIMIT_CORE: (0, 0),
    }
    if settings.get("nproc"):
        limits[resource.RLIMIT_NPROC] = (settings["nproc"],) * 2
    for which, (soft, hard) in limits.items():
        _, current_hard = resource.getrlimit(which)
        if current_hard != resource.RLIM_INFINITY:
            soft, hard = min(soft, current_hard), min(hard, current_hard)
        resource.setrlimit(which, (soft, hard))


def confine(settings: dict) -> None:
    """Apply every kernel layer this machine allows, then exec the run stage (never returns)."""
    layers = []
    try:
        ctypes, libc = _libc()
    except OSError:
        ctypes = libc = None
    if libc is not None:
        # order matters: the namespace needs CAP_SYS_ADMIN, Landlock needs no_new_privs, both before caps go
        if _new_network_namespace(libc):
            layers.append("netns")
        if libc.prctl(_PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) == 0:
            layers.append("no_new_privs")
        layers += _landlock(ctypes, libc, settings["workdir"])
        if os.geteuid() == 0 and _drop_capabilities(libc):
            layers.append("no_caps")
    _rlimits(settings)
    layers.append("rlimits")
    argv = settings["exec"] + [",".join(layers)]
    os.execv(argv[0], argv)


# ----------------------------------------------------------------------------------------------- run stage
_WRITE_FLAGS = os.O_WRONLY | os.O_RDWR | os.O_CREAT | os.O_TRUNC | os.O_APPEND
_PROCESS_EVENTS = ("os.fork", "os.forkpty", "os.exec", "os.posix_spawn", "os.spawn", "os.system", "subprocess.Popen")
# event -> (positions of the paths it modifies, positions of its dir_fd arguments)
_PATH_EVENTS = {
    "os.remove": ((0,), (1,)),
    "os.rmdir": ((0,), (1,)),
    "os.mkdir": ((0,), (2,)),
    "os.rename": ((0, 1), (2, 3)),
    "os.link": ((0, 1), (2, 3)),  # the source too: a hard link to an outside file would make it writable from inside
    "os.symlink": ((1,), (2,)),
    "os.chmod": ((0,), (2,)),
    "os.chown": ((0,), (3,)),
    "os.utime": ((0,), (3,)),
    "os.truncate": ((0,), ()),
    "os.setxattr": ((0,), ()),
    "os.removexattr": ((0,), ()),
}
_ONLY_WORKDIR = "the program may only change files inside its working directory"
_NO_NETWORK = "the program has no network access"
_MEMORY_EVENTS = ("ctypes.dlsym", "ctypes.dlsym/handle", "ctypes.cdata", "ctypes.call_function")


def install_guard(workdir: str, report) -> None:
    """An audit hook that refuses network sockets, writes outside ``workdir``, new processes and similar escapes."""
    import socket
    from _thread import get_ident

    root = os.path.realpath(workdir)
    own_pid = os.getpid()
    # threads inside the hook right now: its own os.path calls raise audit events too, and a flag shared by all
    # threads would let one thread's events pass unchecked while another is being checked
    busy = set()

    def inside(path) -> bool:
        if isinstance(path, int):  # an already open descriptor
            return True
        if hasattr(path, "__fspath__"):
            path = os.fspath(path)
        if isinstance(path, bytes):
            path = os.fsdecode(path)
        if not isinstance(path, str):
            return False
        real = os.path.realpath(os.path.join(os.getcwd(), path))
        return real == root or real.startswith(root + os.sep) or real == "/dev/null"

    def refuse(what: str, why: str = "") -> None:
        report(f"blocked {what}")
        raise PermissionError(f"sandbox: {what} is blocked" + (f": {why}" if why else ""))

    def check(event: str, args: tuple) -> None:
        if event == "open":
            path, mode, flags = args
            writing = (flags & _WRITE_FLAGS) if isinstance(flags, int) else any(c in (mode or "") for c in "wax+")
            if writing and not inside(path):
                refuse(f"writing {path!r}", _ONLY_WORKDIR)
        elif event in _PATH_EVENTS:
            paths, dir_fds = _PATH_EVENTS[event]
            # a path relative to a dir_fd cannot be resolved here, so it is refused unless it is absolute
            relative_to_fd = any(isinstance(args[i], int) and args[i] >= 0 for i in dir_fds if i < len(args))
            for i in paths:
                unresolvable = (
                    relative_to_fd and isinstance(args[i], str | bytes) and not os.path.isabs(os.fsdecode(args[i]))
                )
                if unresolvable or not inside(args[i]):
                    refuse(f"{event} on {args[i]!r}", _ONLY_WORKDIR)
        elif event == "socket.__new__":
            if args[1] != socket.AF_UNIX:
                refuse(f"network access (socket family {args[1]})", _NO_NETWORK)
        elif event in ("socket.connect", "socket.bind", "socket.sendto", "socket.sendmsg"):
            sock, address = args[0], args[1] if len(args) > 1 else None
            is_path = isinstance(address, str | bytes) and address[:1] not in ("\0", b"\0")  # not abstract
            if sock.family != socket.AF_UNIX or not is_path or not inside(address):
                refuse(f"network access ({event} to {address!r})", _NO_NETWORK)
        elif event == "sqlite3.connect":  # SQLite opens its file in C, without an "open" event
            database = args[0]
            if database not in (":memory:", "", b":memory:", b"") and not inside(database):
                refuse(f"opening the database {database!r}", _ONLY_WORKDIR)
        elif event in _PROCESS_EVENTS:
            refuse(f"starting a process ({event})")
        elif event in ("os.kill", "os.killpg") and args[0] not in (0, own_pid):
            refuse(f"signalling process {args[0]} ({event})")
        elif event in ("resource.setrlimit", "resource.prlimit"):
            refuse(f"changing resource limits ({event})")
        elif event in _MEMORY_EVENTS:
            refuse(f"raw memory and foreign-function access ({event})")

    def hook(event: str, args: tuple) -> None:
        thread = get_ident()
        if thread in busy:
            return
        busy.add(thread)
        try:
            check(event, args)
        finally:
            busy.discard(thread)

    sys.addaudithook(hook)


def run(workdir: str, report_fd: int, guard: bool, layers: str) -> None:
    """Run ``<workdir>/main.py`` as ``__main__`` after installing the guard; report what the parent must know."""
    import traceback

    reported = set()

    def report(note: str) -> None:
        kind = note.split(" ", 1)[0]
        if kind in reported:  # one note per kind keeps the pipe far below its buffer size
            return
        reported.add(kind)
        try:
            os.write(report_fd, (note.replace("\n", " ")[:500] + "\n").encode())
        except OSError:
            pass

    path = os.path.join(workdir, "main.py")
    with open(path, encoding="utf-8") as f:
        source = f.read()
    report(f"layers {layers}{',audit_hook' if guard else ''}")
    sys.argv = [path]
    sys.path.insert(0, workdir)  # -I leaves the script's folder off sys.path; user code may import its own files
    if guard:
        install_guard(workdir, report)
    namespace = {"__name__": "__main__", "__file__": path, "__builtins__": __builtins__}
    try:
        exec(compile(source, path, "exec"), namespace)
    except SystemExit:
        raise
    except BaseException as e:
        if isinstance(e, MemoryError):
            report("memory_error")
        # leave out this file's frames (the runner, the guard) so the traceback shows only the user's program
        te = traceback.TracebackException(type(e), e, e.__traceback__)
        te.stack = traceback.StackSummary.from_list([f for f in te.stack if f.filename != __file__])
        print("".join(te.format()), end="", file=sys.stderr)
        sys.stderr.flush()
        sys.exit(1)


if __name__ == "__main__":
    if sys.argv[1] == "confine":
        confine(json.loads(sys.argv[2]))
    else:
        run(sys.argv[2], int(sys.argv[3]), sys.argv[4] == "guard", sys.argv[5])
