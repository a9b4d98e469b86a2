"""Per-rank profiling that the trainer switches on for selected steps.

On CUDA the capture range is opened with `torch.cuda.profiler.start()` (what Nsight's
`capture-range=cudaProfilerApi` waits for). On every device, a `torch.profiler` session records the
range too and writes a Chrome trace per rank and capture when the range closes.
"""

from __future__ import annotations

import functools
import logging
import os
import subprocess
from dataclasses import dataclass, field

import torch

from verl.utils.config import BaseConfig
from verl.utils.device import is_cuda_available

logger = logging.getLogger(__name__)

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
    "DistProfiler",
    "DistProfilerExtension",
    "mark_start_range",
    "mark_end_range",
    "mark_annotate",
]


_NSIGHT_CONTROLLER_OPTIONS = {"trace": "cuda,nvtx,cublas,ucx", "cuda-memory-usage": "true", "cuda-graph-trace": "graph"}
_NSIGHT_WORKER_OPTIONS = {
    **_NSIGHT_CONTROLLER_OPTIONS,
    "capture-range": "cudaProfilerApi",
    "capture-range-end": None,
    "kill": "none",
}
# torch.profiler options a role's `tool_config.torch.contents` may name (the CPU is always recorded)
TORCH_PROFILER_CONTENTS = ("cuda", "cpu", "memory", "shapes", "stack")
# the `tool` values this project runs: null and torch both mean torch.profiler
TORCH_PROFILER_TOOLS = (None, "torch")


@dataclass
class NsightToolConfig(BaseConfig):
    """`tool_config.nsys` (and `global_profiler.global_tool_config.nsys`): verl's Nsight Systems options. No nsys
    session is started here, so only the defaults are accepted (checks.unsupported_keys)."""

    discrete: bool = False
    controller_nsight_options: dict = field(default_factory=lambda: dict(_NSIGHT_CONTROLLER_OPTIONS))
    worker_nsight_options: dict = field(default_factory=lambda: dict(_NSIGHT_WORKER_OPTIONS))


@dataclass
class NPUToolConfig(BaseConfig):
    """`tool_config.npu`: verl's Ascend profiler options (not run here; defaults only)."""

    contents: list[str] = field(default_factory=list)
    level: str = "level0"
    analysis: bool = True
    discrete: bool = False
    profile_token_start: int | None = None
    profile_token_end: int | None = None


@dataclass
class TorchProfilerScheduleConfig(BaseConfig):
    """`tool_config.torch.schedule`: verl's torch.profiler schedule over update mini-batches (not run here; the
    whole profiled step is recorded, so only the defaults, which disable the schedule, are accepted)."""

    skip_first: int = 0
    wait: int = 0
    warmup: int = 0
    active: int = 0
    repeat: int = 0


@dataclass
class TorchProfilerToolConfig(BaseConfig):
    """`tool_config.torch`: what torch.profiler records. `contents` picks torch.profiler's options (`cuda`: device
    activity, `shapes`: record_shapes, `memory`: profile_memory, `stack`: with_stack; empty: device activity only,
    as before); `discrete` is `profiler.discrete` under verl 0.9's name (either one makes each call a capture)."""

    contents: list[str] = field(default_factory=list)
    discrete: bool = False
    profile_token_start: int | None = None
    profile_token_end: int | None = None
    schedule: TorchProfilerScheduleConfig = field(default_factory=TorchProfilerScheduleConfig)


@dataclass
class TorchMemoryToolConfig(BaseConfig):
    """`tool_config.torch_memory` (and the global one): verl's CUDA memory-snapshot tool (not run here)."""

    trace_alloc_max_entries: int = 100_000
    stack_depth: int = 32
    memory_snapshot_num_steps: int = 1
    context: str = "all"
    stacks: str = "all"
    kw_args: dict = field(default_factory=dict)


@dataclass
class PrecisionDebuggerToolConfig(BaseConfig):
    """`tool_config.precision_debugger` (and the global one): verl's msprobe options (not run here)."""

    config_path: str | None = None
    steps: list[int] | None = None
    stages: list[str] | None = None
    strict: bool = False


@dataclass
class ProfilerToolConfig(BaseConfig):
    """A role's `profiler.tool_config`: one block per tool verl knows; torch's is the one run here."""

    npu: NPUToolConfig = field(default_factory=NPUToolConfig)
    nsys: NsightToolConfig = field(default_factory=NsightToolConfig)
    torch: TorchProfilerToolConfig = field(default_factory=TorchProfilerToolConfig)
    torch_memory: TorchMemoryToolConfig = field(default_factory=TorchMemoryToolConfig)
    precision_debugger: PrecisionDebuggerToolConfig = field(default_factory=PrecisionDebuggerToolConfig)


@dataclass
class ProfilerConfig(BaseConfig):
    """A role's `profiler:` block (profiler/profiler.yaml, mounted at each role): which ranks to profile and how.

    A rank is profiled in the steps `trainer.profile_steps` (or `global_profiler.steps`) names when `all_ranks` is
    set or `ranks` holds it (verl v0.4's selection), or when `enable` is set and `ranks` is empty: rank 0 then
    (verl 0.9's). `discrete` (or `tool_config.torch.discrete`): each annotated worker call is its own capture
    instead of one per step. `save_path`: where the Chrome traces go; null takes `global_profiler.save_path`
    (`outputs/profile` under the working directory). `tool`: null or torch, both torch.profiler. `finish_hook_cmd`:
    a shell command run once after the last profiled step, on `finish_hook_ranks` (all with
    `finish_hook_all_ranks`; the profiled ranks when neither is set).
    """

    discrete: bool = False
    all_ranks: bool = False
    ranks: list[int] | None = field(default_factory=list)
    save_path: str | None = None
    tool: str | None = None
    enable: bool = False
    relocate_results: bool = False
    finish_hook_cmd: str | None = None
    finish_hook_all_ranks: bool = False
    finish_hook_ranks: list[int] = field(default_factory=list)
    tool_config: ProfilerToolConfig = field(default_factory=ProfilerToolConfig)

    def __post_init__(self):
        super().__post_init__()
        self.ranks = list(self.ranks) if self.ranks is not None else []
        if not isinstance(self.discrete, bool) or not isinstance(self.all_ranks, bool):
            raise TypeError(f"profiler discrete/all_ranks must be bools, got {self.discrete!r}/{self.all_ranks!r}")

    def union(self, other: ProfilerConfig) -> ProfilerConfig:
        """Profile the ranks of both configs."""
        return ProfilerConfig(
            discrete=self.discrete or other.discrete,
            all_ranks=self.all_ranks or other.all_ranks,
            ranks=sorted(set(self.ranks) | set(other.ranks)),
            save_path=self.save_path or other.save_path,
            tool=self.tool or other.tool,
            enable=self.enable or other.enable,
            relocate_results=self.relocate_results or other.relocate_results,
            finish_hook_cmd=self.finish_hook_cmd or other.finish_hook_cmd,
            finish_hook_all_ranks=self.finish_hook_all_ranks or other.finish_hook_all_ranks,
            finish_hook_ranks=sorted(set(self.finish_hook_ranks) | set(other.finish_hook_ranks)),
            tool_config=self.tool_config,
        )

    def selects(self, rank: int) -> bool:
        """Whether ``rank`` is profiled in a profiled step."""
        if self.all_ranks or rank in self.ranks:
            return True
        return self.enable and not self.ranks and rank == 0

    @property
    def is_discrete(self) -> bool:
        """One capture per annotated call (`discrete`, or verl 0.9's `tool_config.torch.discrete`)."""
        return self.discrete or self.tool_config.torch.discrete


@dataclass
class GlobalToolConfig(BaseConfig):
    """`global_profiler.global_tool_config`: options verl shares between the roles of a tool (none run here)."""

    nsys: NsightToolConfig = field(default_factory=NsightToolConfig)
    torch_memory: TorchMemoryToolConfig = field(default_factory=TorchMemoryToolConfig)
    precision_debugger: PrecisionDebuggerToolConfig = field(default_factory=PrecisionDebuggerToolConfig)


@dataclass
class GlobalProfilerConfig(BaseConfig):
    """`global_profiler`: verl 0.9's trainer-wide profiler keys. `steps` is `trainer.profile_steps` under its new
    name; `tool`, `save_path`, `relocate_results` and the finish hook are what each role's block inherits;
    `profile_continuous_steps` keeps one capture open across consecutive profiled steps."""

    tool: str | None = None
    steps: list[int] | None = None
    profile_continuous_steps: bool = False
    save_path: str = "outputs/profile"
    relocate_results: bool = False
    finish_hook_cmd: str | None = None
    finish_hook_all_ranks: bool = False
    finish_hook_ranks: list[int] = field(default_factory=list)
    global_tool_config: GlobalToolConfig = field(default_factory=GlobalToolConfig)


def mark_start_range(message: str | None = None, color=None, domain=None, category=None):
    """Open a named profiler range and return a handle for `mark_end_range`."""
    message = message or "range"
    if is_cuda_available:
        return ("nvtx", torch.cuda.nvtx.range_start(message))
    handle = torch.profiler.record_function(message)
    handle.__enter__()
    return ("record_function", handle)


def mark_end_range(handle) -> None:
    """Close a range opened by `mark_start_range`."""
    kind, value = handle
    if kind == "nvtx":
        torch.cuda.nvtx.range_end(value)
    else:
        value.__exit__(None, None, None)


def mark_annotate(message: str | None = None, color=None, domain=None, category=None):
    """Decorator that wraps each call of a function in a named profiler range."""

    def decorator(func):
        @functools.wraps(func)
        def wrapper(*args, **kwargs):
            handle = mark_start_range(message or func.__name__, color, domain, category)
            try:
                return func(*args, **kwargs)
            finally:
                mark_end_range(handle)

        return wrapper

    return decorator


class DistProfiler:
    """Profiler of one rank; `start()`/`stop()` open and close a capture when this rank is selected.

    ``role`` (the worker's section, e.g. ``actor``) is passed to the finish hook as ``VERL_PROFILE_ROLE``.
    """

    def __init__(self, rank: int, config: ProfilerConfig | None = None, role: str | None = None, **kwargs):
        self.config = config if config is not None else ProfilerConfig()
        if not isinstance(self.config, ProfilerConfig):
            # Accept the yaml block (DictConfig or dict) as well as the dataclass.
            self.config = ProfilerConfig.from_config(self.config)
        if self.config.tool not in TORCH_PROFILER_TOOLS:
            raise ValueError(
                f"profiler tool={self.config.tool!r} is not available here; null or torch (torch.profiler) is"
            )
        self.rank = rank
        self.role = role
        self.this_rank = self.config.selects(rank)
        self.discrete = self.config.is_discrete
        contents = set(self.config.tool_config.torch.contents)
        unknown = contents - set(TORCH_PROFILER_CONTENTS)
        if unknown:
            raise ValueError(
                f"profiler tool_config.torch.contents has {sorted(unknown)}; expected some of {TORCH_PROFILER_CONTENTS}"
            )
        self._contents = contents
        self._finish_hook_cmd = self.config.finish_hook_cmd
        if self.config.finish_hook_all_ranks:
            self._finish_hook_here = True
        elif self.config.finish_hook_ranks:
            self._finish_hook_here = rank in self.config.finish_hook_ranks
        else:
            self._finish_hook_here = self.this_rank
        # a role that selects no rank at all runs no hook either
        self._active = self.config.all_ranks or bool(self.config.ranks) or self.config.enable
        self.this_step = False
        self._session = None
        self._capture = 0

    def _save_dir(self) -> str:
        return self.config.save_path or os.path.join(os.getcwd(), "outputs", "profile")

    def _open(self) -> None:
        record_device = is_cuda_available and (not self._contents or "cuda" in self._contents)
        if record_device:
            torch.cuda.profiler.start()
        activities = [torch.profiler.ProfilerActivity.CPU]
        if record_device:
            activities.append(torch.profiler.ProfilerActivity.CUDA)
        self._session = torch.profiler.profile(
            activities=activities,
            record_shapes="shapes" in self._contents,
            profile_memory="memory" in self._contents,
            with_stack="stack" in self._contents,
        )
        self._session.__enter__()

    def _close(self) -> None:
        if self._session is None:
            return
        self._session.__exit__(None, None, None)
        if is_cuda_available and (not self._contents or "cuda" in self._contents):
            torch.cuda.profiler.stop()
        save_dir = self._save_dir()
        os.makedirs(save_dir, exist_ok=True)
        path = os.path.join(save_dir, f"rank{self.rank}_capture{self._capture}.json")
        self._session.export_chrome_trace(path)
        logger.info("profiler trace of rank %d written to %s", self.rank, path)
        self._session = None
        self._capture += 1

    def start(self, **kwargs) -> None:
        """Begin a profiled step on this rank (annotated calls capture individually when discrete)."""
        if not self.this_rank:
            return
        self.this_step = True
        if not self.discrete:
            self._open()

    def stop(self, run_command: bool = True) -> None:
        """End the profiled step and write the trace; ``run_command`` (the last profiled step): then run the
        finish hook on the ranks it names."""
        if self.this_rank:
            self.this_step = False
            if not self.discrete:
                self._close()
        if run_command and self._active and self._finish_hook_cmd and self._finish_hook_here:
            self._run_finish_hook()

    def _run_finish_hook(self) -> None:
        """Run ``finish_hook_cmd`` in a shell with the run's context in ``VERL_PROFILE_*``; a failure is logged, the
        training goes on (the traces are already written)."""
        env = dict(os.environ)
        env.update(
            VERL_PROFILE_SAVE_PATH=self._save_dir(),
            VERL_PROFILE_TOOL="torch",
            VERL_PROFILE_RANK=str(self.rank),
            VERL_PROFILE_PID=str(os.getpid()),
        )
        if self.role:
            env["VERL_PROFILE_ROLE"] = self.role
        try:
            done = subprocess.run(["/bin/sh", "-c", self._finish_hook_cmd], env=env, check=False)
        except OSError as error:
            logger.warning("profiler finish_hook_cmd could not start on rank %d: %s", self.rank, error)
            return
        if done.returncode != 0:
            command, code = self._finish_hook_cmd, done.returncode
            logger.warning("profiler finish_hook_cmd %r exited with %d on rank %d", command, code, self.rank)

    @staticmethod
    def annotate(message: str | None = None, color=None, domain=None, category=None, **kwargs):
        """Method decorator: a named range per call; in discrete mode also one capture per call.

        The decorated method's object must have a `profiler` attribute (see `DistProfilerExtension`).
        """

        def decorator(func):
            @functools.wraps(func)
            def wrapper(self, *args, **kw):
                profiler = getattr(self, "profiler", None)
                discrete = profiler is not None and profiler.this_step and profiler.discrete
                if discrete:
                    profiler._open()
                handle = mark_start_range(message or func.__name__, color, domain, category)
                try:
                    return func(self, *args, **kw)
                finally:
                    mark_end_range(handle)
                    if discrete:
                        profiler._close()

            return wrapper

        return decorator


class DistProfilerExtension:
    """Worker mixin exposing `start_profile`/`stop_profile` to the trainer (called on every rank).

    The two methods are ONE_TO_ALL worker methods; `verl.single_controller.base.decorator` registers them when it
    loads, since utils sit below the single controller and do not import it.
    """

    def __init__(self, profiler: DistProfiler):
        self.profiler = profiler

    def start_profile(self, **kwargs) -> None:
        """Start profiling this worker."""
        self.profiler.start(**kwargs)

    def stop_profile(self, run_command: bool = True) -> None:
        """Stop profiling this worker; ``run_command``: this was the last profiled step (the finish hook runs)."""
        self.profiler.stop(run_command=run_command)
