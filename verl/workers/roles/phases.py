"""Decorators for the workers' compute methods (the phases of a step: generate, log-probs, update, values, scores).

They sit under ``@register``: what they add happens inside the worker process, around the method itself.
"""

from __future__ import annotations

import functools
import time

from verl.utils.debug import DistProfiler
from verl.utils.device import is_accelerator_available, release_freed_host_memory

__all__ = ["compute_phase", "is_compute_phase", "reports_compute_time"]


def reports_compute_time(func):
    """Record the worker's own seconds in ``output.meta_info["timing"]["worker/<method>"]`` (rank 0's survives the
    collect), so the driver can tell compute from controller overhead."""

    @functools.wraps(func)
    def wrapper(self, *args, **kwargs):
        start = time.perf_counter()
        output = func(self, *args, **kwargs)
        output.meta_info.setdefault("timing", {})[f"worker/{func.__name__}"] = time.perf_counter() - start
        return output

    return wrapper


def compute_phase(func):
    """A named profiler range around the call, or a capture of its own under ``profiler.discrete`` (the worker's
    ``profiler``, see :class:`~verl.utils.debug.DistProfilerExtension`); and, on a CPU-only machine, the memory the
    call freed handed back to the OS when it ends if the host is short of it (:func:`release_freed_host_memory`):
    otherwise each phase's freed tensors stay resident beside the next one's, for it to reuse."""
    profiled = DistProfiler.annotate(func.__name__)(func)

    @functools.wraps(func)
    def wrapper(self, *args, **kwargs):
        try:
            return profiled(self, *args, **kwargs)
        finally:
            if not is_accelerator_available():
                release_freed_host_memory()

    wrapper._verl_compute_phase = True
    return wrapper


def is_compute_phase(method) -> bool:
    """Whether ``method`` (or what a decorator above it wraps) went through :func:`compute_phase`."""
    while method is not None:
        if getattr(method, "_verl_compute_phase", False):
            return True
        method = getattr(method, "__wrapped__", None)
    return False
