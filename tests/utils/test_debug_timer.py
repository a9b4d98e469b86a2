"""Tests for verl.utils.debug: timers, memory logger, profiler and timing reduction."""

import logging
import os
import time

import pytest
import torch.distributed as dist
import torch.multiprocessing as mp

from verl.utils.debug import (
    DistProfiler,
    DistProfilerExtension,
    GPUMemoryLogger,
    ProfilerConfig,
    log_gpu_memory_usage,
    marked_timer,
    reduce_timing,
    simple_timer,
)


def test_simple_timer_accumulates():
    timing = {}
    with simple_timer("gen", timing):
        time.sleep(0.02)
    first = timing["gen"]
    assert 0.015 < first < 1.0
    with simple_timer("gen", timing):
        time.sleep(0.02)
    assert timing["gen"] > first + 0.015


def test_marked_timer_nested_and_records_on_exception():
    timing = {}
    with marked_timer("step", timing):
        with marked_timer("adv", timing, color="brown"):
            time.sleep(0.01)
    assert timing["step"] >= timing["adv"] > 0.005
    with pytest.raises(RuntimeError):
        with marked_timer("boom", timing):
            raise RuntimeError("x")
    assert "boom" in timing


def test_reduce_timing_without_dist_is_a_copy():
    raw = {"a": 1.0}
    out = reduce_timing(raw)
    assert out == raw and out is not raw


def _reduce_worker(rank, world_size, init_file, result_file):
    dist.init_process_group("gloo", init_method=f"file://{init_file}", rank=rank, world_size=world_size)
    out = reduce_timing({"gen": float(rank + 1), "update": 10.0 * rank})
    if rank == 0:
        with open(result_file, "w") as f:
            f.write(repr(out))
    dist.destroy_process_group()


def test_reduce_timing_averages_over_ranks(tmp_path):
    result = tmp_path / "out.txt"
    mp.spawn(_reduce_worker, args=(2, str(tmp_path / "init"), str(result)), nprocs=2, join=True)
    assert eval(result.read_text()) == {"gen": 1.5, "update": 5.0}


def test_gpu_memory_logger_is_safe_on_cpu(caplog):
    log = logging.getLogger("test_mem")

    class Actor:
        @GPUMemoryLogger(role="dp actor", logger=log, level=logging.INFO)
        def update(self, x):
            return x * 2

    with caplog.at_level(logging.INFO, logger="test_mem"):
        assert Actor().update(3) == 6
    messages = [r.getMessage() for r in caplog.records]
    assert any(m.startswith("dp actor Before update, memory (GB)") for m in messages)
    assert any(m.startswith("dp actor After update") for m in messages)
    with caplog.at_level(logging.INFO, logger="test_mem"):
        log_gpu_memory_usage("after init", logger=log, level=logging.INFO)
    assert any("after init, memory (GB)" in r.getMessage() for r in caplog.records)


def test_profiler_config_defaults():
    cfg = ProfilerConfig()
    assert cfg.ranks == [] and cfg.discrete is False and cfg.all_ranks is False
    assert ProfilerConfig(ranks=[1]).union(ProfilerConfig(ranks=[0, 1])).ranks == [0, 1]


def test_dist_profiler_writes_trace_only_on_selected_rank(tmp_path):
    class Worker(DistProfilerExtension):
        def __init__(self, rank):
            DistProfilerExtension.__init__(
                self, DistProfiler(rank, ProfilerConfig(ranks=[0], save_path=str(tmp_path / "prof")))
            )

        @DistProfiler.annotate("compute")
        def compute(self):
            return sum(range(100))

    selected, other = Worker(0), Worker(1)
    for w in (selected, other):
        w.start_profile()
        assert w.compute() == 4950
        w.stop_profile()
    files = os.listdir(tmp_path / "prof")
    assert files == ["rank0_capture0.json"]
    assert "compute" in (tmp_path / "prof" / files[0]).read_text()


def test_dist_profiler_discrete_captures_each_call(tmp_path):
    class Worker(DistProfilerExtension):
        def __init__(self):
            cfg = ProfilerConfig(discrete=True, all_ranks=True, save_path=str(tmp_path))
            DistProfilerExtension.__init__(self, DistProfiler(3, cfg))

        @DistProfiler.annotate()
        def step(self):
            return 1

    w = Worker()
    w.step()  # outside a profiled step: no capture
    w.start_profile()
    w.step()
    w.step()
    w.stop_profile()
    assert sorted(os.listdir(tmp_path)) == ["rank3_capture0.json", "rank3_capture1.json"]


def test_profiler_path_reexports_the_debug_names():
    """verl.utils.profiler (verl head's path) holds the very objects of verl.utils.debug (verl 0.4's path)."""
    import verl.utils.debug as debug
    import verl.utils.profiler as profiler

    assert profiler.__all__
    for name in profiler.__all__:
        assert getattr(profiler, name) is getattr(debug, name), name


def test_profiler_extension_needs_no_controller_and_is_one_to_all_under_it():
    """utils sit below the single controller: importing them loads none of it; once the controller's decorator
    module loads, start_profile/stop_profile are ONE_TO_ALL worker methods."""
    import subprocess
    import sys

    code = (
        "import sys\n"
        "from verl.utils.debug import DistProfilerExtension\n"
        "assert not [m for m in sys.modules if m.startswith('verl.single_controller')]\n"
        "from verl.single_controller.base.decorator import MAGIC_ATTR, Dispatch\n"
        "for name in ('start_profile', 'stop_profile'):\n"
        "    assert getattr(getattr(DistProfilerExtension, name), MAGIC_ATTR)['dispatch_mode'] is Dispatch.ONE_TO_ALL\n"
        "print('ok')\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300)
    assert out.returncode == 0 and out.stdout.strip() == "ok", out.stderr
