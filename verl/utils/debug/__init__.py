"""Timers, memory logging and profiling helpers (verl.utils.debug)."""

from verl.utils.debug.performance import (
    GPUMemoryLogger,
    get_memory_stats,
    log_gpu_memory_usage,
    log_print,
    marked_timer,
    reduce_timing,
    simple_timer,
)
from verl.utils.debug.profile import (
    DistProfiler,
    DistProfilerExtension,
    ProfilerConfig,
    mark_annotate,
    mark_end_range,
    mark_start_range,
)

__all__ = [
    "GPUMemoryLogger",
    "get_memory_stats",
    "log_gpu_memory_usage",
    "log_print",
    "marked_timer",
    "reduce_timing",
    "simple_timer",
    "DistProfiler",
    "DistProfilerExtension",
    "ProfilerConfig",
    "mark_annotate",
    "mark_end_range",
    "mark_start_range",
]
