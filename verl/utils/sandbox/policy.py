"""The least isolation the local sandbox runs model-written code under, and the check that enforces it.

The sandbox applies every layer the kernel offers (see ``local``); without user namespaces or Landlock only the
process boundary, rlimits and the audit hook remain, and the hook is a tripwire, not a boundary. So before the first
program runs, the layers this machine gives are compared with a minimum; below it nothing runs, and the error names
the missing layer, the fix, and how to lower the minimum on purpose.

Requirements (names for ``VERL_SANDBOX_MIN_ISOLATION`` or ``run_python(..., min_isolation=...)``):

- ``process``: a fresh interpreter in its own session and temporary directory (always given);
- ``rlimits``: CPU time, address space, file size and core limits (always given on Linux);
- ``network``: an empty network namespace (``netns``), so no packet leaves, loopback included;
- ``writes``: Landlock (``landlock-fs``), so files are created or changed only inside the temporary directory.

The default minimum is all four.
"""

from __future__ import annotations

import os
from collections.abc import Iterable

__all__ = ["DEFAULT_MINIMUM", "ENV_VAR", "REQUIREMENTS", "SandboxIsolationError", "check_isolation", "minimum_from"]

ENV_VAR = "VERL_SANDBOX_MIN_ISOLATION"

# requirement -> (layers of which one must be in force, how to get it)
REQUIREMENTS: dict[str, tuple[tuple[str, ...], str]] = {
    "process": ((), "always given"),
    "rlimits": (("rlimits",), "run on Linux (resource limits come from setrlimit)"),
    "network": (
        ("netns",),
        "run as root, or allow unprivileged user namespaces (sysctl user.max_user_namespaces > 0 and, on "
        "Debian/Ubuntu, kernel.unprivileged_userns_clone=1 or kernel.apparmor_restrict_unprivileged_userns=0); in "
        "a container, give it CAP_SYS_ADMIN or a seccomp profile that allows unshare",
    ),
    "writes": (
        ("landlock-fs",),
        "use a Linux kernel >= 5.13 with Landlock enabled (CONFIG_SECURITY_LANDLOCK=y and 'landlock' in the "
        "lsm= boot parameter); in a container, a seccomp profile that allows the landlock_* system calls",
    ),
}
DEFAULT_MINIMUM: tuple[str, ...] = ("process", "rlimits", "network", "writes")
_RISK = {
    "rlimits": "use unbounded CPU time and memory",
    "network": "reach the network",
    "writes": "write any file this user can",
}


class SandboxIsolationError(RuntimeError):
    """This machine gives the sandbox less isolation than the minimum: no model-written code is run."""


def minimum_from(value: str | Iterable[str] | None) -> tuple[str, ...]:
    """The minimum as a tuple of requirement names: ``value`` (a comma list or names), else ``$VERL_SANDBOX_MIN_
    ISOLATION``, else :data:`DEFAULT_MINIMUM`. ``process`` alone is the lowest minimum there is."""
    source = "min_isolation"
    if value is None:
        value = os.environ.get(ENV_VAR)
        source = ENV_VAR
        if value is None:
            return DEFAULT_MINIMUM
    names = [n.strip() for n in value.split(",")] if isinstance(value, str) else [str(n).strip() for n in value]
    names = [n for n in names if n]
    unknown = [n for n in names if n not in REQUIREMENTS]
    if unknown:
        raise ValueError(
            f"{source}={value!r}: unknown requirement(s) {unknown}; expected names from {list(REQUIREMENTS)}"
        )
    return tuple(dict.fromkeys(["process", *names]))


def check_isolation(layers: Iterable[str], minimum: Iterable[str]) -> None:
    """Raise :class:`SandboxIsolationError` when ``layers`` (what a run gets here) miss a requirement of ``minimum``."""
    layers = set(layers)
    missing = [name for name in minimum if REQUIREMENTS[name][0] and not layers & set(REQUIREMENTS[name][0])]
    if not missing:
        return
    lines = [
        f"the local sandbox will not run model-written code on this machine: it gives only {sorted(layers)}, and the "
        f"minimum ({', '.join(minimum)}) also needs:"
    ]
    lines += [f"  - {name} (layer {' or '.join(REQUIREMENTS[name][0])}): {REQUIREMENTS[name][1]}" for name in missing]
    kept = ",".join(n for n in minimum if n not in missing)
    risks = " and ".join(_RISK[name] for name in missing)
    lines.append(
        f"To run with less isolation on purpose, set {ENV_VAR}={kept} (programs can then {risks}), or score code "
        "in a remote sandbox (reward_model.sandbox_fusion.url)."
    )
    raise SandboxIsolationError("\n".join(lines))
