"""release_freed_host_memory hands freed heap memory back to the OS between a CPU worker's phases: always when
forced, otherwise only when glibc holds more than a quarter of what the host still has available."""

import ctypes.util
import sys

import pytest
import torch

from verl.utils import device
from verl.utils.device import held_free_heap_bytes, release_freed_host_memory

glibc_only = pytest.mark.skipif(
    not sys.platform.startswith("linux") or "libc" not in str(ctypes.util.find_library("c")), reason="glibc only"
)


def _rss_mb() -> float:
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * 4096 / 2**20


def _hold_freed_heap_memory() -> torch.Tensor:
    """Leave ~300 MB of freed chunks in glibc's main heap; returns the live tensor that pins the heap's top.

    A freed 16 MB tensor raises glibc's mmap threshold (up to its 32 MB cap), so the 1 MB tensors after it live in
    the heap; with the last one still alive the heap cannot shrink from its top, and the freed ones stay resident
    until trimmed."""
    big = torch.ones(4 * 2**20)
    del big
    tensors = [torch.ones(2**18) for _ in range(300)]  # 300 x 1 MB, pages touched
    keep = tensors[-1]
    del tensors
    return keep


@glibc_only
def test_freed_heap_memory_returns_to_the_os_when_forced():
    keep = _hold_freed_heap_memory()
    before = _rss_mb()
    assert release_freed_host_memory(force=True)
    after = _rss_mb()
    assert before - after > 150, (before, after)
    assert keep.sum().item() == 2**18  # the live tensor is untouched


@glibc_only
def test_freed_heap_memory_is_kept_for_reuse_while_the_host_has_room_and_returned_when_it_is_short(monkeypatch):
    keep = _hold_freed_heap_memory()
    held = held_free_heap_bytes()
    if held is None:
        pytest.skip("glibc without mallinfo2 (before 2.33): every call trims")
    assert held > 250 * 2**20, held
    # plenty available: the freed chunks stay, for the next phase to reuse without page faults
    monkeypatch.setattr(device, "host_memory_available_bytes", lambda: 100 * held)
    before = _rss_mb()
    assert not release_freed_host_memory()
    assert before - _rss_mb() < 50, (before, _rss_mb())
    # what glibc holds is over a quarter of what is left: handed back
    monkeypatch.setattr(device, "host_memory_available_bytes", lambda: 2 * held)
    before = _rss_mb()
    assert release_freed_host_memory()
    assert before - _rss_mb() > 150, (before, _rss_mb())
    assert keep.sum().item() == 2**18


@glibc_only
def test_the_room_is_shared_by_the_hosts_worker_processes(monkeypatch):
    held = 100 * 2**20
    monkeypatch.setattr(device, "held_free_heap_bytes", lambda: held)
    # 8x held available: one worker may hold a quarter of it (2x held) and keeps it; four share it (half held each)
    monkeypatch.setattr(device, "host_memory_available_bytes", lambda: 8 * held)
    monkeypatch.setenv("LOCAL_WORLD_SIZE", "1")
    monkeypatch.delenv("VERL_HOST_WORKERS", raising=False)
    assert not release_freed_host_memory()
    monkeypatch.setenv("LOCAL_WORLD_SIZE", "4")
    assert release_freed_host_memory()


@glibc_only
def test_without_mallinfo2_every_call_trims(monkeypatch):
    monkeypatch.setattr(device, "held_free_heap_bytes", lambda: None)
    assert release_freed_host_memory()
