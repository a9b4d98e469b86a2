"""Step timers, memory logging and cross-rank timing reduction."""

from __future__ import annotations

import datetime
import functools
import inspect
import logging
import os
import time
from collections.abc import Iterator
from contextlib import contextmanager

import torch
import torch.distributed as dist

from verl.utils.device import get_torch_device, is_accelerator_available
from verl.utils.logger import DecoratorLoggerBase

__all__ = [
    "simple_timer",
    "marked_timer",
    "reduce_timing",
    "get_memory_stats",
    "log_gpu_memory_usage",
    "GPUMemoryLogger",
    "log_print",
]

_GB = 1024**3


@contextmanager
def simple_timer(name: str, timing_raw: dict[str, float]) -> Iterator[None]:
    """Add the wall-clock seconds of the `with` block to `timing_raw[name]`."""
    start = time.perf_counter()
    try:
        yield
    finally:
        timing_raw[name] = timing_raw.get(name, 0.0) + (time.perf_counter() - start)


@contextmanager
def marked_timer(
    name: str,
    timing_raw: dict[str, float],
    color: str | None = None,
    domain: str | None = None,
    category: str | None = None,
) -> Iterator[None]:
    """Like `simple_timer`, and also mark the block as a named range for profilers.

    The range is an NVTX range on CUDA (visible in Nsight) and a `record_function` range otherwise
    (visible in torch.profiler traces). `color`, `domain` and `category` are accepted for verl
    compatibility; only the name is recorded.
    """
    from verl.utils.debug.profile import mark_end_range, mark_start_range

    handle = mark_start_range(message=name, color=color, domain=domain, category=category)
    try:
        with simple_timer(name, timing_raw):
            yield
    finally:
        mark_end_range(handle)


def reduce_timing(timing_raw: dict[str, float]) -> dict[str, float]:
    """Average each timing over all ranks when torch.distributed is initialized; otherwise return a copy."""
    if not (dist.is_available() and dist.is_initialized()) or not timing_raw:
        return dict(timing_raw)
    keys = sorted(timing_raw)
    values = torch.tensor([float(timing_raw[k]) for k in keys], dtype=torch.float64)
    if is_accelerator_available() and dist.get_backend() != "gloo":
        values = values.to(get_torch_device().current_device())
    # SUM then divide: ReduceOp.AVG exists only on NCCL, not on gloo (CPU).
    dist.all_reduce(values, op=dist.ReduceOp.SUM)
    values = values.cpu() / dist.get_world_size()
    return {k: float(v) for k, v in zip(keys, values.tolist())}


def get_memory_stats() -> dict[str, float]:
    """Memory of this process in GB: accelerator allocated/reserved when one is present, CPU RSS always."""
    stats: dict[str, float] = {}
    if is_accelerator_available():
        device = get_torch_device()
        stats["allocated_gb"] = device.memory_allocated() / _GB
        stats["reserved_gb"] = device.memory_reserved() / _GB
        stats["max_allocated_gb"] = device.max_memory_allocated() / _GB
    try:
        import psutil

        stats["cpu_rss_gb"] = psutil.Process(os.getpid()).memory_info().rss / _GB
    except ImportError:  # psutil is optional; the accelerator numbers are the important ones
        pass
    return stats


def _format_memory(head: str) -> str:
    parts = [f"{k}: {v:.2f}" for k, v in get_memory_stats().items()]
    return f"{head}, memory (GB): " + ", ".join(parts)


def log_gpu_memory_usage(head: str, logger: logging.Logger | None = None, level: int = logging.DEBUG, rank: int = 0):
    """Log (or print, without a logger) memory usage on global rank `rank` (any rank when not distributed)."""
    current = dist.get_rank() if dist.is_available() and dist.is_initialized() else 0
    if rank is not None and current != rank:
        return
    message = _format_memory(head)
    if logger is None:
        print(message)
    else:
        logger.log(level, message)


class GPUMemoryLogger(DecoratorLoggerBase):
    """Decorator that logs memory before and after each call of the wrapped function or method.

    Safe on CPU (reports process RSS). Usage: `@GPUMemoryLogger(role="actor", logger=logger)`.
    """

    def __init__(
        self, role: str, logger: logging.Logger | None = None, level: int = logging.DEBUG, log_only_rank_0: bool = True
    ):
        rank = dist.get_rank() if dist.is_available() and dist.is_initialized() else 0
        super().__init__(role, logger, level, rank, log_only_rank_0)

    def __call__(self, func):
        @functools.wraps(func)
        def wrapper(*args, **kwargs):
            self.log(_format_memory(f"Before {func.__name__}"))
            output = func(*args, **kwargs)
            self.log(_format_memory(f"After {func.__name__}"))
            return output

        return wrapper


def log_print(ctn) -> None:
    """Print `ctn` prefixed with a timestamp and the caller's file:line."""
    now = datetime.datetime.now().strftime("%Y-%m-%d %H:%M:%S")
    frame = inspect.currentframe().f_back
    where = f"{os.path.basename(frame.f_code.co_filename)}:{frame.f_lineno}"
    print(f"[{now}] ({where}) {ctn}")
