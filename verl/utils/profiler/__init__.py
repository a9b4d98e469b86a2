"""verl's newer import path for the profiler and timer helpers (``verl.utils.profiler``); they live in
:mod:`verl.utils.debug`, verl 0.4's path, and are re-exported here under the same names. The config classes that
verl 0.9's YAML names as ``verl.utils.profiler.config.<Tool>Config`` are in :mod:`verl.utils.profiler.config`."""

from verl.utils.debug import (
    DistProfiler,
    DistProfilerExtension,
    GPUMemoryLogger,
    ProfilerConfig,
    get_memory_stats,
    log_gpu_memory_usage,
    log_print,
    mark_annotate,
    mark_end_range,
    mark_start_range,
    marked_timer,
    reduce_timing,
    simple_timer,
)

__all__ = [
    "DistProfiler",
    "DistProfilerExtension",
    "GPUMemoryLogger",
    "ProfilerConfig",
    "get_memory_stats",
    "log_gpu_memory_usage",
    "log_print",
    "mark_annotate",
    "mark_end_range",
    "mark_start_range",
    "marked_timer",
    "reduce_timing",
    "simple_timer",
]
