"""release_freed_host_memory hands freed heap memory back to the OS between a CPU worker's phases."""

import ctypes.util
import sys

import pytest
import torch

from verl.utils.host_memory import release_freed_host_memory


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


_FAULTS_OF_REALLOCATION = """
import resource, sys
import torch
from verl.utils.host_memory import reuse_freed_host_memory

if sys.argv[1] == "reuse":
    assert reuse_freed_host_memory()
for _ in range(3):  # 64 MB, allocated and freed: its pages are in now (glibc settles in two or three)
    torch.ones(16 * 2**20)
before = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
for _ in range(5):
    torch.ones(16 * 2**20)  # the same size again, as each micro batch's activations are
print(resource.getrusage(resource.RUSAGE_SELF).ru_minflt - before)
"""


@pytest.mark.skipif(
    not sys.platform.startswith("linux") or "libc" not in str(ctypes.util.find_library("c")), reason="glibc only"
)
def test_reused_host_memory_is_not_faulted_in_again():
    """glibc maps a 64 MB tensor afresh at each allocation (16k page faults each); after reuse_freed_host_memory
    the freed memory serves the next one. In a subprocess: mallopt changes the whole process."""
    import subprocess

    def faults(mode: str) -> int:
        out = subprocess.run([sys.executable, "-c", _FAULTS_OF_REALLOCATION, mode], capture_output=True, text=True)
        assert out.returncode == 0, out.stderr
        return int(out.stdout.split()[-1])

    default, reused = faults("default"), faults("reuse")
    assert default > 5 * 16_000 * 0.9, default  # every allocation faulted its 16k pages in again
    assert reused < 1_000, reused


_KEEP_OR_RELEASE = """
import torch
import verl.utils.host_memory as host_memory

def rss_mb():
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * 4096 / 2**20

assert host_memory.reuse_freed_host_memory(workers_on_host=2)
assert 0 < host_memory._KEEP_FREE_BYTES  # a quarter of half the available memory
x = torch.ones(64 * 2**20)  # 256 MB, touched
del x
assert host_memory.free_heap_bytes() >= 256 * 2**20
host_memory._KEEP_FREE_BYTES = 512 * 2**20  # more than lies free: kept
before = rss_mb()
assert host_memory.release_excess_host_memory() is False
assert rss_mb() > before - 16
host_memory._KEEP_FREE_BYTES = 128 * 2**20  # less than lies free: handed back
assert host_memory.release_excess_host_memory() is True
assert rss_mb() < before - 200, (before, rss_mb())
print("ok")
"""


@pytest.mark.skipif(
    not sys.platform.startswith("linux") or "libc" not in str(ctypes.util.find_library("c")), reason="glibc only"
)
def test_a_phase_end_hands_back_only_what_the_worker_does_not_keep():
    import subprocess

    out = subprocess.run([sys.executable, "-c", _KEEP_OR_RELEASE], capture_output=True, text=True)
    assert out.returncode == 0 and out.stdout.strip() == "ok", out.stderr
