"""Tests for verl.utils.debug: timers, memory logger, profiler and timing reduction."""

import logging
import os
import time

import pytest
import torch
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


def _profiled_step(profiler: DistProfiler, run_command: bool = True) -> None:
    profiler.start()
    with torch.profiler.record_function("work"):
        torch.ones(4, 4) @ torch.ones(4, 4)
    profiler.stop(run_command=run_command)


def test_enable_without_ranks_profiles_rank_zero_as_verl_09_does(tmp_path):
    """verl 0.9's `enable` with no ranks named profiles rank 0; ranks / all_ranks select as in verl v0.4, enable or
    not; a role that selects nothing writes nothing."""
    cases = {
        "enabled": (ProfilerConfig(enable=True), {0}),
        "v04_ranks": (ProfilerConfig(ranks=[1]), {1}),
        "enabled_ranks": (ProfilerConfig(enable=True, ranks=[1]), {1}),
        "all": (ProfilerConfig(all_ranks=True), {0, 1}),
        "off": (ProfilerConfig(), set()),
    }
    for name, (cfg, ranks) in cases.items():
        cfg.save_path = str(tmp_path / name)
        for rank in (0, 1):
            _profiled_step(DistProfiler(rank, cfg))
        written = set(os.listdir(tmp_path / name)) if (tmp_path / name).exists() else set()
        assert written == {f"rank{r}_capture0.json" for r in ranks}, name


def test_torch_contents_pick_the_recorders_options(tmp_path):
    """`tool_config.torch.contents`: shapes adds the operators' input shapes (record_shapes), as in verl 0.9."""
    texts = {}
    for name, contents in (("plain", []), ("shapes", ["shapes"])):
        cfg = ProfilerConfig(ranks=[0], save_path=str(tmp_path / name))
        cfg.tool_config.torch.contents = contents
        _profiled_step(DistProfiler(0, cfg))
        texts[name] = (tmp_path / name / "rank0_capture0.json").read_text()
    assert "Input Dims" in texts["shapes"] and "Input Dims" not in texts["plain"]
    with pytest.raises(ValueError, match="contents"):
        bad = ProfilerConfig(ranks=[0])
        bad.tool_config.torch.contents = ["npu"]
        DistProfiler(0, bad)


def test_torch_discrete_is_profiler_discrete_under_verl_09s_name(tmp_path):
    cfg = ProfilerConfig(ranks=[0])
    cfg.tool_config.torch.discrete = True
    assert DistProfiler(0, cfg).discrete and not DistProfiler(0, ProfilerConfig(ranks=[0])).discrete


def test_a_tool_other_than_torch_is_refused():
    with pytest.raises(ValueError, match="nsys"):
        DistProfiler(0, ProfilerConfig(ranks=[0], tool="nsys"))
    assert DistProfiler(0, ProfilerConfig(ranks=[0], tool="torch")).this_rank


def test_traces_land_in_save_path_whatever_relocate_results_says(tmp_path):
    for relocate in (False, True):
        folder = tmp_path / str(relocate)
        _profiled_step(DistProfiler(0, ProfilerConfig(ranks=[0], save_path=str(folder), relocate_results=relocate)))
        assert os.listdir(folder) == ["rank0_capture0.json"]


def test_finish_hook_runs_once_after_the_last_profiled_step_on_the_ranks_it_names(tmp_path):
    """The hook sees the run's context in VERL_PROFILE_*; it runs only when the trainer says the step was the last
    profiled one, on finish_hook_ranks (else the profiled ranks); a failing hook does not stop training."""
    log = tmp_path / "hook.log"
    cmd = f'echo "$VERL_PROFILE_RANK $VERL_PROFILE_ROLE $VERL_PROFILE_TOOL $VERL_PROFILE_SAVE_PATH" >> {log}'
    cfg = ProfilerConfig(ranks=[0, 1], save_path=str(tmp_path / "traces"), finish_hook_cmd=cmd)
    for rank in (0, 1, 2):
        profiler = DistProfiler(rank, cfg, role="actor")
        _profiled_step(profiler, run_command=False)
        _profiled_step(profiler, run_command=True)
    lines = sorted(log.read_text().splitlines())
    assert lines == [f"{r} actor torch {tmp_path / 'traces'}" for r in (0, 1)]
    log.unlink()
    only_one = ProfilerConfig(ranks=[0, 1], finish_hook_cmd=cmd, finish_hook_ranks=[1], save_path=str(tmp_path))
    for rank in (0, 1):
        _profiled_step(DistProfiler(rank, only_one), run_command=True)
    assert [line.split()[0] for line in log.read_text().splitlines()] == ["1"]
    failing = ProfilerConfig(ranks=[0], finish_hook_cmd="exit 3", save_path=str(tmp_path / "f"))
    _profiled_step(DistProfiler(0, failing), run_command=True)  # logged, not raised


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
