"""Joining and leaving the global torch.distributed process group of a torchrun-launched process (verl's path)."""

from __future__ import annotations

import os
from datetime import timedelta

import torch.distributed as dist

from verl.utils.device import get_dist_backend, get_torch_device, is_accelerator_available

__all__ = ["destroy_global_process_group", "initialize_global_process_group"]


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
