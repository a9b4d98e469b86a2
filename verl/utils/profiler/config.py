"""The profiler's config classes at the module path verl 0.9's YAML names in its ``_target_`` keys; they live in
:mod:`verl.utils.debug.profile`."""

from verl.utils.debug.profile import (
    GlobalProfilerConfig,
    GlobalToolConfig,
    NPUToolConfig,
    NsightToolConfig,
    PrecisionDebuggerToolConfig,
    ProfilerConfig,
    ProfilerToolConfig,
    TorchMemoryToolConfig,
    TorchProfilerScheduleConfig,
    TorchProfilerToolConfig,
)

__all__ = [
    "GlobalProfilerConfig",
    "GlobalToolConfig",
    "NPUToolConfig",
    "NsightToolConfig",
    "PrecisionDebuggerToolConfig",
    "ProfilerConfig",
    "ProfilerToolConfig",
    "TorchMemoryToolConfig",
    "TorchProfilerScheduleConfig",
    "TorchProfilerToolConfig",
]
