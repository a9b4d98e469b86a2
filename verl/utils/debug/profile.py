"""Per-rank profiling that the trainer switches on for selected steps.

On CUDA the capture range is opened with `torch.cuda.profiler.start()` (what Nsight's
`capture-range=cudaProfilerApi` waits for). On every device, a `torch.profiler` session records the
range too and writes a Chrome trace per rank and capture when the range closes.
"""

from __future__ import annotations

import functools
import logging
import os
from dataclasses import dataclass, field

import torch

from verl.utils.config import BaseConfig
from verl.utils.device import is_cuda_available

logger = logging.getLogger(__name__)

__all__ = [
    "ProfilerConfig",
    "DistProfiler",
    "DistProfilerExtension",
    "mark_start_range",
    "mark_end_range",
    "mark_annotate",
]


@dataclass
class ProfilerConfig(BaseConfig):
    """Which ranks to profile and how (keys of the `profiler:` blocks in ppo_trainer.yaml).

    `discrete`: each annotated worker call is its own capture instead of one per training step.
    `all_ranks` / `ranks`: the ranks to profile. `save_path` (ours): where torch.profiler traces go
    (default `outputs/profile` under the working directory).
    """

    discrete: bool = False
    all_ranks: bool = False
    ranks: list[int] | None = field(default_factory=list)
    save_path: str | None = None

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
        )


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
    """Profiler of one rank; `start()`/`stop()` open and close a capture when this rank is selected."""

    def __init__(self, rank: int, config: ProfilerConfig | None = None, **kwargs):
        self.config = config if config is not None else ProfilerConfig()
        if not isinstance(self.config, ProfilerConfig):
            # Accept the yaml block (DictConfig or dict) as well as the dataclass.
            self.config = ProfilerConfig(**dict(self.config))
        self.rank = rank
        self.this_rank = self.config.all_ranks or rank in self.config.ranks
        self.discrete = self.config.discrete
        self.this_step = False
        self._session = None
        self._capture = 0

    def _open(self) -> None:
        if is_cuda_available:
            torch.cuda.profiler.start()
        activities = [torch.profiler.ProfilerActivity.CPU]
        if is_cuda_available:
            activities.append(torch.profiler.ProfilerActivity.CUDA)
        self._session = torch.profiler.profile(activities=activities, record_shapes=False)
        self._session.__enter__()

    def _close(self) -> None:
        if self._session is None:
            return
        self._session.__exit__(None, None, None)
        if is_cuda_available:
            torch.cuda.profiler.stop()
        save_dir = self.config.save_path or os.path.join(os.getcwd(), "outputs", "profile")
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

    def stop(self) -> None:
        """End the profiled step and write the trace."""
        if not self.this_rank:
            return
        self.this_step = False
        if not self.discrete:
            self._close()

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

    def stop_profile(self) -> None:
        """Stop profiling this worker."""
        self.profiler.stop()
