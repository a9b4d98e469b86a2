"""verl command lines add code-default keys with ``+key=value``; here those keys have YAML entries.

Hydra refuses ``+key=value`` for a key the config already has ("Could not append to config"), and verl v0.4.1
reads keys such as ``data.seed``, ``actor_rollout_ref.rollout.seed`` or ``*.fsdp_config.mixed_precision`` with
code defaults, so its users add them with ``+``. This project keeps every default in the YAML, so its entry points
read a ``+a.b=value`` argument as ``++a.b=value`` (add the key, or set it where it exists): the same meaning, and
no error. A top-level ``+name=...`` (a Hydra config-group choice) is left alone.
"""

from __future__ import annotations

import sys
from collections.abc import Callable, Sequence

__all__ = ["run_hydra_entry", "verl_command_line"]


def verl_command_line(argv: Sequence[str]) -> list[str]:
    """``argv`` with each ``+a.b=value`` written as ``++a.b=value``."""
    out = []
    for arg in argv:
        key = arg.split("=", 1)[0]
        if arg.startswith("+") and not arg.startswith("++") and "=" in arg and "." in key:
            arg = "+" + arg
        out.append(arg)
    return out


def run_hydra_entry(main: Callable[[], None]) -> None:
    """Call a ``@hydra.main`` function after rewriting ``sys.argv`` (see the module docstring)."""
    sys.argv[:] = verl_command_line(sys.argv)
    main()
