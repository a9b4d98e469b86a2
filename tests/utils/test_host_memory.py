"""release_freed_host_memory hands freed heap memory back to the OS between a CPU worker's phases."""

import ctypes.util
import sys

import pytest
import torch

from verl.utils.device import release_freed_host_memory


def _rss_mb() -> float:
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * 4096 / 2**20


@pytest.mark.skipif(
    not sys.platform.startswith("linux") or "libc" not in str(ctypes.util.find_library("c")), reason="glibc only"
)
def test_freed_heap_memory_returns_to_the_os():
    # A freed 16 MB tensor raises glibc's mmap threshold (up to its 32 MB cap), so the 1 MB tensors after it live in
    # the heap; with the last one still alive the heap cannot shrink from its top, and the freed ones stay resident
    # until trimmed.
    big = torch.ones(4 * 2**20)
    del big
    tensors = [torch.ones(2**18) for _ in range(300)]  # 300 x 1 MB, pages touched
    keep = tensors[-1]
    del tensors
    before = _rss_mb()
    release_freed_host_memory()
    after = _rss_mb()
    assert before - after > 150, (before, after)
    assert keep.sum().item() == 2**18  # the live tensor is untouched
