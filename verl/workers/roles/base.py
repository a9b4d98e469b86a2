"""What every role worker shares: its private typed config section, its profiler and the MFU metric of an update."""

from __future__ import annotations

import copy

from verl.single_controller.base import Worker
from verl.utils.config import omega_conf_to_dataclass
from verl.utils.debug import DistProfiler, ProfilerConfig

__all__ = ["mfu_metric", "role_profiler", "typed_section"]


def typed_section(config, section_type):
    """The worker's own typed copy of its config section (a DictConfig from a recipe, or a typed section).

    A copy, because the worker rewrites batch sizes to per-rank values: with the in-process group the trainer's
    object must not change under it.
    """
    return copy.deepcopy(omega_conf_to_dataclass(config, section_type, allow_extra=True))


def role_profiler(worker: Worker, profiler_config: ProfilerConfig, role: str | None = None) -> DistProfiler:
    """The worker's profiler (``<section>.profiler``); ``role`` names the section for the finish hook."""
    return DistProfiler(rank=worker.rank, config=profiler_config, role=role)


def mfu_metric(flops_counter, global_token_num, elapsed: float, world_size: int) -> float:
    """Model FLOPs utilisation of an update that took ``elapsed`` seconds over ``global_token_num`` tokens."""
    from verl.utils.flops_counter import mfu

    achieved, promised = flops_counter.estimate_flops(global_token_num, elapsed)
    return mfu(achieved, promised, world_size)
