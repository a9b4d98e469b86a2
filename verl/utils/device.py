"""The one place that knows which accelerator (if any) this process runs on: CUDA/ROCm, Ascend NPU, or CPU."""

import logging

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


_LIBC_MALLOC_TRIM = None


def release_freed_host_memory() -> None:
    """Give the OS back the memory freed tensors left in glibc's heaps (``malloc_trim``); a no-op without glibc.

    A CPU worker's phases (generate, log-probs, update) each free gigabytes of tensors, but glibc keeps freed
    chunks of its heaps (and of one arena per thread) for reuse, so the process's resident memory is the sum of
    what the phases left rather than the largest one. Trimming between phases costs milliseconds; a smaller mmap
    threshold (``MALLOC_MMAP_THRESHOLD_``) would release memory too, but page-faults every large tensor afresh and
    measured 20-28% slower steps.
    """
    global _LIBC_MALLOC_TRIM
    if _LIBC_MALLOC_TRIM is None:
        import ctypes
        import ctypes.util

        try:
            _LIBC_MALLOC_TRIM = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6").malloc_trim
        except (OSError, AttributeError):  # not glibc (macOS, musl): nothing to trim
            _LIBC_MALLOC_TRIM = False
    if _LIBC_MALLOC_TRIM:
        _LIBC_MALLOC_TRIM(0)
