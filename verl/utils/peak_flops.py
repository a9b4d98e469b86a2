"""The peak FLOP/s that MFU divides by: a GPU's datasheet figure, or a CPU host's, measured once and cached.

A CPU has no datasheet figure a run can look up (cores, clocks, vector units and the BLAS all matter), so the peak
is measured: a square matrix product in the compute dtype on all of this host's cores, repeated for a fraction of a
second, best of a few rounds. The product is the one a model's linear layers compute, ``x @ W.T``
(``torch.nn.functional.linear``): on a CPU without native bf16 PyTorch runs a bf16 ``a @ b`` through a scalar
fallback, 0.7 GFLOP/s on a 2-core AVX2 host, against 22 GFLOP/s for the same product as a linear layer (fp32: 119
against 130), so a probe with ``matmul`` put bf16 MFU at 2,800%. The result is cached in
``~/.cache/verl/peak_flops.json`` (``$VERL_CACHE_DIR`` overrides the folder) under the CPU model, dtype and thread
count, so each host measures once.

Other processes on the cores only slow the probe down, so a probe taken on a busy host reads low (on a shared
2-core box: 74.5 GFLOP/s at load 7 against 90.9 at load 2.8, which made a phase's MFU read 113%). The cache keeps
the host's load average at the probe; a later run on a quieter host probes again, and the cache keeps the higher
figure: a peak is never lowered by a later, busier probe.
"""

from __future__ import annotations

import json
import logging
import os
import platform
import time
from dataclasses import dataclass

import torch

logger = logging.getLogger(__name__)

__all__ = ["Peak", "cpu_peak_flops", "device_peak"]

_PROBE_N = 1024
_PROBE_SECONDS = 0.25
_PROBE_ROUNDS = 3


@dataclass(frozen=True)
class Peak:
    """``flops`` per second of one device (on CPU: the whole host) and how it was obtained."""

    flops: float
    source: str


def _cache_path() -> str:
    folder = os.environ.get("VERL_CACHE_DIR") or os.path.join(os.path.expanduser("~"), ".cache", "verl")
    return os.path.join(folder, "peak_flops.json")


def _cpu_model() -> str:
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def _measure(dtype: torch.dtype, threads: int) -> float:
    previous = torch.get_num_threads()
    torch.set_num_threads(threads)
    try:
        a = torch.randn(_PROBE_N, _PROBE_N).to(dtype)
        b = torch.randn(_PROBE_N, _PROBE_N).to(dtype)
        linear = torch.nn.functional.linear  # a @ b.T, as every linear layer computes
        linear(a, b)  # warm-up: thread pool, BLAS kernels, page faults
        best = 0.0
        for _ in range(_PROBE_ROUNDS):
            count, start = 0, time.perf_counter()
            while True:
                linear(a, b)
                count += 1
                elapsed = time.perf_counter() - start
                if elapsed >= _PROBE_SECONDS:
                    break
            best = max(best, 2 * _PROBE_N**3 * count / elapsed)
        return best
    finally:
        torch.set_num_threads(previous)


def _load_average() -> float:
    try:
        return os.getloadavg()[0]
    except OSError:  # not available on this platform: every probe counts as quiet
        return 0.0


def _cached_entry(value) -> dict:
    """A cache entry as ``{"flops", "load"}``; a bare number is an entry of a cache written before loads were kept
    (its probe's load unknown: taken as busy, so a quieter run probes again)."""
    if isinstance(value, dict):
        return {"flops": float(value["flops"]), "load": float(value.get("load", float("inf")))}
    return {"flops": float(value), "load": float("inf")}


def cpu_peak_flops(dtype: torch.dtype = torch.float32, threads: int | None = None) -> Peak:
    """This host's measured matmul FLOP/s in ``dtype`` on ``threads`` threads (default: every core), cached; probed
    again when the host is quieter now than at the cached probe (the higher figure is kept)."""
    threads = threads or os.cpu_count() or 1
    # "linear": the probe's form (entries without it came from an a @ b probe, which reads bf16 far too low)
    key = f"{_cpu_model()}|{str(dtype).removeprefix('torch.')}|{threads}|linear"
    path = _cache_path()
    cache = {}
    try:
        with open(path) as f:
            cache = json.load(f)
    except (OSError, ValueError):
        pass
    load = _load_average()
    entry = _cached_entry(cache[key]) if key in cache else None
    # a probe taken while more than the probe's threads' worth of other work ran is worth repeating when it is quieter
    busy_then = entry is not None and entry["load"] > threads * 0.5 and load < entry["load"] - 0.5
    if entry is None or busy_then:
        measured = _measure(dtype, threads)
        if entry is None or measured > entry["flops"]:
            entry = {"flops": measured, "load": load}
        else:  # the quieter probe read no higher: the cached figure stands, now known to be a quiet host's
            entry = {"flops": entry["flops"], "load": min(entry["load"], load)}
        cache[key] = entry
        try:
            os.makedirs(os.path.dirname(path), exist_ok=True)
            tmp = f"{path}.{os.getpid()}.tmp"
            with open(tmp, "w") as f:
                json.dump(cache, f, indent=1, sort_keys=True)
            os.replace(tmp, path)
        except OSError as e:  # a read-only home only costs a re-measurement next time
            logger.warning("could not cache the CPU peak in %s: %s", path, e)
        logger.info("measured this host's peak: %.1f GFLOP/s at load %.1f (%s)", entry["flops"] / 1e9, load, key)
    dtype_name = str(dtype).removeprefix("torch.")
    return Peak(
        entry["flops"],
        f"measured {_PROBE_N}x{_PROBE_N} {dtype_name} GEMM (x @ W.T) on {threads} thread(s), {_cpu_model()}",
    )


def device_peak(device: str, dtype: torch.dtype) -> Peak | None:
    """The peak of one ``device`` (``cpu``: the whole host) in ``dtype``; None for an accelerator not in the table."""
    if device == "cpu":
        return cpu_peak_flops(dtype)
    from verl.utils.flops_counter import get_device_flops

    flops = get_device_flops(unit="B") * 1e9
    if flops == float("inf"):
        return None
    return Peak(flops, "datasheet dense bf16 peak of the accelerator")
