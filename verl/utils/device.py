"""The one place that knows which accelerator (if any) this process runs on: CUDA/ROCm, Ascend NPU, or CPU."""

import ctypes
import logging
import os

import torch

logger = logging.getLogger(__name__)


def is_torch_npu_available() -> bool:
    """True when torch_npu is importable and an Ascend NPU is visible."""
    try:
        import torch_npu  # noqa: F401
    except ImportError:
        return False
    return hasattr(torch, "npu") and torch.npu.is_available()


is_cuda_available: bool = torch.cuda.is_available()
is_npu_available: bool = is_torch_npu_available()


def is_accelerator_available() -> bool:
    """True on CUDA/ROCm or NPU machines, False on plain CPU."""
    return is_cuda_available or is_npu_available


def get_device_name() -> str:
    """``"cuda"``, ``"npu"`` or ``"cpu"`` for this process."""
    if is_cuda_available:
        return "cuda"
    if is_npu_available:
        return "npu"
    return "cpu"


def get_torch_device():
    """The ``torch.<device>`` namespace (``torch.cuda``, ``torch.npu``, ``torch.cpu``)."""
    name = get_device_name()
    try:
        return getattr(torch, name)
    except AttributeError:
        logger.warning("torch has no namespace for device %s; falling back to torch.cuda", name)
        return torch.cuda


def get_device_id() -> int:
    """Index of the current accelerator (0 on CPU)."""
    if not is_accelerator_available():
        return 0
    return get_torch_device().current_device()


def get_nccl_backend() -> str:
    """The collective backend for this device: nccl on CUDA/ROCm, hccl on NPU, gloo on CPU."""
    if is_cuda_available:
        return "nccl"
    if is_npu_available:
        return "hccl"
    return "gloo"


def get_dist_backend() -> str:
    """Backend string for init_process_group: CPU tensors always go over gloo, device tensors over nccl/hccl."""
    if is_accelerator_available():
        return f"cpu:gloo,{get_device_name()}:{get_nccl_backend()}"
    return "gloo"


def device_exists(device: str) -> bool:
    """Whether a requested device kind (cpu, cuda, npu) is usable in this process."""
    return {"cpu": True, "cuda": is_cuda_available, "npu": is_npu_available}.get(device, False)


def peak_rss_gb() -> float:
    """Peak resident memory of this process so far, in GiB (host memory: what a CPU run runs out of)."""
    import resource
    import sys

    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    return peak / (2**30 if sys.platform == "darwin" else 2**20)  # bytes on macOS, KiB on Linux


_LIBC = None


class _Mallinfo2(ctypes.Structure):
    """glibc's ``struct mallinfo2`` (2.33+): every field a ``size_t``."""

    _fields_ = [
        (name, ctypes.c_size_t)
        for name in (
            "arena",
            "ordblks",
            "smblks",
            "hblks",
            "hblkhd",
            "usmblks",
            "fsmblks",
            "uordblks",
            "fordblks",
            "keepcost",
        )
    ]


def _glibc():
    """glibc (``malloc_trim``, ``mallinfo2``), or None where the C library is another (macOS, musl)."""
    global _LIBC
    if _LIBC is None:
        import ctypes.util

        try:
            libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6")
            libc.malloc_trim  # noqa: B018 - glibc only
            if hasattr(libc, "mallinfo2"):
                libc.mallinfo2.restype = _Mallinfo2
            _LIBC = libc
        except (OSError, AttributeError):
            _LIBC = False
    return _LIBC or None


def held_free_heap_bytes() -> int | None:
    """Bytes of freed memory glibc holds in its heaps for reuse (``mallinfo2().fordblks``), or None without
    glibc 2.33's ``mallinfo2``."""
    libc = _glibc()
    if libc is None or not hasattr(libc, "mallinfo2"):
        return None
    return int(libc.mallinfo2().fordblks)


def host_memory_available_bytes() -> int | None:
    """``MemAvailable`` of ``/proc/meminfo``: what the host can still give without swapping; None off Linux."""
    try:
        with open("/proc/meminfo") as f:
            for line in f:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) * 1024
    except OSError:
        pass
    return None


# What all the worker processes on a host may hold freed for reuse, as a share of the host's available memory (see
# release_freed_host_memory)
HELD_SHARE_OF_AVAILABLE = 0.25


def host_worker_processes() -> int:
    """The worker processes sharing this host's cores and memory: ``VERL_HOST_WORKERS`` (all groups' processes on
    the host, where groups on separate pools share it: a standalone rollout beside the actor), else this group's own
    (``LOCAL_WORLD_SIZE``)."""
    return max(1, int(os.environ.get("VERL_HOST_WORKERS") or os.environ.get("LOCAL_WORLD_SIZE") or 1))


def host_memory_share_bytes(share: float) -> float | None:
    """This worker process's part (one of :func:`host_worker_processes`) of ``share`` of the host's available
    memory; None off Linux."""
    available = host_memory_available_bytes()
    return None if available is None else share * available / host_worker_processes()


def release_freed_host_memory(force: bool = False) -> bool:
    """Give the OS back the memory freed tensors left in glibc's heaps (``malloc_trim``) when the host is short of
    it, or always with ``force``; returns whether it trimmed (never without glibc).

    A CPU worker's phases (generate, log-probs, update) each free gigabytes of tensors, and glibc keeps freed chunks of
    its heaps (and of one arena per thread) for reuse, so the process's resident memory grows towards the sum of what
    the phases left rather than the largest one. Handing them back costs little, but the next phase then page-faults
    every page afresh: on a 25M model's GRPO step (AVX2 host, in one process) trimming after every phase and micro
    batch took 74-81 thousand faults per reference pass and 360-470 thousand per update, and made them 10-20%
    slower than without it (2.2-3.0 s against 2.1-2.3 s; 9.0-11.0 s against 8.1-8.6 s), for a 14% lower peak (1.77
    against 2.05 GB). So memory is handed back only when what glibc holds exceeds this process's part (one of the
    host's worker processes) of a quarter (``HELD_SHARE_OF_AVAILABLE``) of what the host still has available: a box
    with room to spare reuses it, a tight one trims as before, and as the held memory grows the available shrinks, so
    the workers together hold at most about a fifth of what was available. Without ``mallinfo2`` (glibc before 2.33)
    every call trims. A smaller mmap threshold (``MALLOC_MMAP_THRESHOLD_``) would release memory too, but page-faults
    every large tensor afresh and measured 20-28% slower steps.
    """
    libc = _glibc()
    if libc is None:
        return False
    if not force:
        held, room = held_free_heap_bytes(), host_memory_share_bytes(HELD_SHARE_OF_AVAILABLE)
        if held is not None and room is not None and held <= room:
            return False
    libc.malloc_trim(0)
    return True
