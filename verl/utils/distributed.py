"""torch.distributed process groups: a torchrun-launched process's global group (verl's path), a Ray worker's
group, and a CPU worker's share of the host's cores."""

from __future__ import annotations

import logging
import os
from datetime import timedelta

import torch
import torch.distributed as dist

from verl.utils.device import get_dist_backend, get_torch_device, host_worker_processes, is_accelerator_available

logger = logging.getLogger(__name__)

__all__ = [
    "adopt_worker_threads",
    "cpu_share",
    "destroy_global_process_group",
    "init_distributed",
    "initialize_global_process_group",
    "use_cpu_share",
]


def initialize_global_process_group(timeout_second: int = 36000) -> tuple[int, int, int]:
    """Join the default process group from torchrun's env (``RANK``, ``LOCAL_RANK``, ``WORLD_SIZE``).

    gloo on CPU, nccl/hccl for device tensors (see :func:`verl.utils.device.get_dist_backend`); binds this process to
    device ``LOCAL_RANK`` where there is an accelerator. A group that already exists is kept. Without torchrun the
    process is rank 0 of 1 on ``127.0.0.1:29500``. Returns ``(local_rank, rank, world_size)``.
    """
    local_rank = int(os.environ.get("LOCAL_RANK", 0))
    rank = int(os.environ.get("RANK", 0))
    world_size = int(os.environ.get("WORLD_SIZE", 1))
    if is_accelerator_available():
        get_torch_device().set_device(local_rank)
    if not dist.is_initialized():
        os.environ.setdefault("MASTER_ADDR", "127.0.0.1")
        os.environ.setdefault("MASTER_PORT", "29500")
        dist.init_process_group(
            backend=get_dist_backend(), rank=rank, world_size=world_size, timeout=timedelta(seconds=timeout_second)
        )
    return local_rank, rank, world_size


def destroy_global_process_group() -> None:
    """Leave and destroy the default process group; a no-op where none was initialised."""
    if dist.is_initialized():
        dist.destroy_process_group()


def init_distributed(timeout_s: int | None = None) -> None:
    """Join the worker group's torch.distributed group (env:// rendezvous), once per process; on a CPU-only host,
    also give this worker its share of the host's cores. ``timeout_s``: how long a collective may wait (the policy's
    ``actor_rollout_ref.nccl_timeout``; None: torch's default); the first role of a process to join sets it."""
    if dist.is_initialized():
        return
    if not is_accelerator_available():
        use_cpu_share()
    dist.init_process_group(
        backend=get_dist_backend(),
        rank=int(os.environ["RANK"]),
        world_size=int(os.environ["WORLD_SIZE"]),
        init_method=os.environ.get("DIST_INIT_METHOD"),
        timeout=None if timeout_s is None else timedelta(seconds=timeout_s),
    )


def cpu_share(local_world_size: int) -> int:
    """Threads for one of ``local_world_size`` worker processes on this host: its share of the usable cores."""
    try:
        cores = len(os.sched_getaffinity(0))
    except AttributeError:  # not on Linux
        cores = os.cpu_count() or 1
    return max(1, cores // max(1, local_world_size))


def use_cpu_share() -> int:
    """Run torch on this worker's share of the host's cores.

    Ray starts each actor with OMP_NUM_THREADS=1 (one CPU bundle per worker): one worker on a 2-core box would leave
    a core idle, two workers on a 16-core box fourteen. The engines (vLLM's CPU worker included) read torch's
    thread count when they start, so this runs before anything is built.
    """
    threads = cpu_share(host_worker_processes())
    torch.set_num_threads(threads)
    os.environ["OMP_NUM_THREADS"] = str(threads)  # for the processes and libraries that read it later
    logger.info("using %d CPU threads in this worker", threads)
    return threads


def adopt_worker_threads() -> int:
    """Give the calling thread (one the worker started to drive an engine) the worker's CPU thread count.

    OpenMP keeps the thread count per thread: torch.set_num_threads sets the calling thread's and records it process
    wide, and a thread started later runs at the process's OpenMP default (OMP_NUM_THREADS as the library loaded,
    else every core) until its first torch parallel region applies the recorded count. vLLM's CPU attention reads the
    count before that and again inside the model, and refuses the call when they differ ("thread_num (2 vs. 1)").
    torch.get_num_threads applies the recorded count to the calling thread; it is returned.
    """
    return torch.get_num_threads()
