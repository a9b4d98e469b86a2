"""A worker process's torch.distributed group, and its share of the host's CPU cores."""

from __future__ import annotations

import logging
import os

import torch
import torch.distributed as dist

from verl.utils.device import get_dist_backend, is_accelerator_available

logger = logging.getLogger(__name__)

__all__ = ["cpu_share", "init_distributed", "use_cpu_share"]


def init_distributed() -> None:
    """Join the worker group's torch.distributed group (env:// rendezvous), once per process; on a CPU-only host,
    also give this worker its share of the host's cores."""
    if dist.is_initialized():
        return
    if not is_accelerator_available():
        use_cpu_share()
    dist.init_process_group(
        backend=get_dist_backend(),
        rank=int(os.environ["RANK"]),
        world_size=int(os.environ["WORLD_SIZE"]),
        init_method=os.environ.get("DIST_INIT_METHOD"),
    )


def cpu_share(local_world_size: int) -> int:
    """Threads for one of ``local_world_size`` worker processes on this host: its share of the usable cores."""
    try:
        cores = len(os.sched_getaffinity(0))
    except AttributeError:  # not on Linux
        cores = os.cpu_count() or 1
    return max(1, cores // max(1, local_world_size))


def use_cpu_share() -> None:
    """Run torch on this worker's share of the host's cores.

    Ray starts each actor with OMP_NUM_THREADS=1 (one CPU bundle per worker): one worker on a 2-core box would leave
    a core idle, two workers on a 16-core box fourteen. The engines (vLLM's CPU worker included) read torch's
    thread count when they start, so this runs before anything is built.
    """
    threads = cpu_share(int(os.environ.get("LOCAL_WORLD_SIZE") or 1))
    torch.set_num_threads(threads)
    os.environ["OMP_NUM_THREADS"] = str(threads)  # for the processes and libraries that read it later
    logger.info("using %d CPU threads in this worker", threads)
