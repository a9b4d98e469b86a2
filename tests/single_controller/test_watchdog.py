"""The watchdog of worker-group calls: a worker that sleeps in a phase is reported, with its stacks, in seconds; a
worker killed during a call is reported with its role, the phase, the host's memory and the settings to turn."""

import os
import re
import time

import pytest
import ray

from tests.single_controller.workers_for_tests import DyingWorker, SleepyWorker
from verl.single_controller.base.watchdog import Watchdog, WorkerGroupTimeout, WorkerLostError, where_stuck
from verl.single_controller.inprocess import InProcessWorkerGroup
from verl.single_controller.ray import RayClassWithInitArgs, RayResourcePool, RayWorkerGroup

SLEEP_LINE = "time.sleep(self.seconds)  # the line the watchdog names"


def _sleep_line_number() -> int:
    import tests.single_controller.workers_for_tests as module

    with open(module.__file__) as f:
        return next(i for i, line in enumerate(f, 1) if SLEEP_LINE in line)


@pytest.fixture(scope="module", autouse=True)
def _leave_no_process_group():
    yield
    import torch.distributed as dist

    if dist.is_initialized():
        dist.destroy_process_group()


def test_deadlines_per_phase():
    watchdog = Watchdog(timeout_s=10, phase_timeout_s={"init_model": 100, "update_actor": None, "work": 0})
    assert watchdog.deadline("init_model") == 100 and watchdog.key_for("init_model").endswith(".init_model")
    assert watchdog.deadline("update_actor") == 10 and watchdog.key_for("update_actor") == "trainer.watchdog_timeout_s"
    assert watchdog.deadline("work") == 0  # 0 disables that phase's deadline
    assert Watchdog(timeout_s=0).deadline("anything") == 0


def test_memory_report_reads_the_heartbeat_and_stale_files_go(tmp_path, monkeypatch):
    import json

    from verl.single_controller.base import watchdog

    monkeypatch.setattr(watchdog.tempfile, "gettempdir", lambda: str(tmp_path))
    path = watchdog.memory_file_path(123)
    os.makedirs(os.path.dirname(path))
    with open(path, "w") as f:
        json.dump({"time": time.time() - 2.0, "host": "h", "memory": "used 1.0 of 2.0 GiB (50%)", "rss": 3 * 2**29}, f)
    report = watchdog.memory_report(123)
    assert re.search(
        r"now; at the last sample of worker process 123, 2\.\ds before it was lost: used 1\.0 of 2\.0", report
    )
    assert report.endswith("the worker's resident memory 1.50 GiB") and not os.path.exists(path)  # read once
    assert watchdog.memory_report(123).endswith("(no earlier sample of worker process 123)")
    fresh, stale = watchdog.memory_file_path(1), watchdog.memory_file_path(2)
    for name in (fresh, stale):
        open(name, "w").close()
    os.utime(stale, (time.time() - 3600, time.time() - 3600))
    # stack files: a running process's stays, a gone one's goes
    live_stack, gone_stack = watchdog.stack_file_path(os.getpid()), watchdog.stack_file_path(_ended_pid())
    for name in (live_stack, gone_stack):
        open(name, "w").close()
    removed = watchdog.remove_stale_files(os.path.dirname(path))
    assert sorted(removed) == sorted([stale, gone_stack])
    assert os.path.exists(fresh) and os.path.exists(live_stack)


def _ended_pid() -> int:
    """The pid of a child process that has ended and been reaped."""
    import subprocess
    import sys

    child = subprocess.Popen([sys.executable, "-c", "pass"])
    child.wait()
    return child.pid


def test_where_stuck_picks_the_phase_thread():
    stacks = (
        "Thread 0x00007f01 (most recent call first):\n"
        '  File "/x/threading.py", line 320 in wait\n\n'
        "Current thread 0x00007f02 (most recent call first):\n"
        '  File "/x/w.py", line 12 in helper\n'
        '  File "/x/w.py", line 30 in work\n'
        '  File "/x/ray.py", line 5 in main\n'
    )
    assert where_stuck(stacks, "work") == "/x/w.py:12 in helper"
    assert where_stuck(stacks, "other") == "/x/threading.py:320 in wait"
    assert where_stuck("", "work").startswith("unknown line")


def test_ray_group_reports_the_rank_that_does_not_return_blocking_or_not(ray_cluster, tmp_path):
    pool = RayResourcePool([2], use_gpu=False)
    wg = RayWorkerGroup(pool, RayClassWithInitArgs(ray.remote(SleepyWorker), 1, 60.0), device_name="cpu")
    groups = [(wg, pool)]
    try:
        wg.set_watchdog(Watchdog(timeout_s=0, phase_timeout_s={"work": 3}, dump_dir=str(tmp_path)))
        start = time.monotonic()
        with pytest.raises(WorkerGroupTimeout) as info:
            wg.work()
        elapsed = time.monotonic() - start
        error = info.value
        assert error.phase == "work" and list(error.stuck) == [1]
        assert error.stuck[1].endswith(f"workers_for_tests.py:{_sleep_line_number()} in work"), error.stuck
        assert "trainer.watchdog_phase_timeout_s.work" in str(error) and "rank 1 at " in str(error)
        assert elapsed < 10, elapsed
        dumps = sorted(os.listdir(error.dump_dir))
        assert dumps == ["rank_0.txt", "rank_1.txt"]
        assert SLEEP_LINE.split("(")[0] not in open(os.path.join(error.dump_dir, "rank_0.txt")).read()
        assert "in work" in open(os.path.join(error.dump_dir, "rank_1.txt")).read()
        # the path for workers on other nodes: a task pinned to the worker's node signals it and reads its file
        remote = wg._collect_stacks(via_node_tasks=True)
        assert where_stuck(remote[1], "work") == error.stuck[1] and "in work" not in remote[0]
        # a group whose workers return in time is unaffected by its deadline
        quick_pool = RayResourcePool([1], use_gpu=False)
        quick = RayWorkerGroup(quick_pool, RayClassWithInitArgs(ray.remote(SleepyWorker), 5), device_name="cpu")
        groups.append((quick, quick_pool))
        quick.set_watchdog(Watchdog(timeout_s=30, dump_dir=str(tmp_path / "unused")))
        assert quick.work() == [0] and not (tmp_path / "unused").exists()
        _check_non_blocking_calls(quick, wg, tmp_path)
    finally:
        # the session's Ray cluster has 4 CPUs: a leaked worker or placement group starves later tests
        for group, group_pool in groups:
            for worker in group.workers:
                ray.kill(worker)
            for pg in group_pool.pgs or []:
                ray.util.remove_placement_group(pg)


def _check_non_blocking_calls(quick, stuck, tmp_path):
    """Non-blocking calls (``blocking=False``) get their phase's deadline, counted from the call and enforced where
    the driver waits: ``resolve_result`` on the list of refs, ``DataProtoFuture.get`` (also of a chunk). ``stuck``'s
    rank 1 is still asleep in ``work``, so its later calls queue behind it."""
    import pickle

    import torch

    from verl import DataProto
    from verl.protocol import DataProtoFuture
    from verl.trainer.ppo.weight_sync import resolve_result

    data = DataProto.from_dict({"x": torch.arange(4.0)})
    assert resolve_result(quick.work_later()) == [0]
    assert torch.equal(quick.double_later(data).get().batch["x"], torch.arange(4.0) * 2)
    stuck.set_watchdog(
        Watchdog(timeout_s=0, phase_timeout_s={"work_later": 3, "double_later": 3}, dump_dir=str(tmp_path))
    )
    pending = stuck.work_later()
    assert isinstance(pending, list) and type(pickle.loads(pickle.dumps(pending))) is list  # verl's shape
    time.sleep(2)  # the deadline counts from the call, not from the wait
    start = time.monotonic()
    with pytest.raises(WorkerGroupTimeout) as info:
        resolve_result(pending)
    assert time.monotonic() - start < 2.5
    assert info.value.phase == "work_later" and list(info.value.stuck) == [1]
    assert "'work_later' did not return within 3s (trainer.watchdog_phase_timeout_s.work_later)" in str(info.value)
    future = stuck.double_later(data)
    assert isinstance(future, DataProtoFuture)
    start = time.monotonic()
    with pytest.raises(WorkerGroupTimeout, match="'double_later' did not return within 3s"):
        future.chunk(2)[0].get()  # a chunk of the future carries the deadline too
    assert time.monotonic() - start < 8


def test_inprocess_group_interrupts_the_call(tmp_path):
    wg = InProcessWorkerGroup(
        RayResourcePool([1], use_gpu=False), RayClassWithInitArgs(ray.remote(SleepyWorker), 0, 60.0)
    )
    wg.set_watchdog(Watchdog(timeout_s=1, dump_dir=str(tmp_path)))
    start = time.monotonic()
    with pytest.raises(WorkerGroupTimeout) as info:
        wg.work()
    assert time.monotonic() - start < 10
    error = info.value
    assert error.stuck[0].endswith(f"workers_for_tests.py:{_sleep_line_number()} in work"), error.stuck
    assert "'work' did not return within 1s (trainer.watchdog_timeout_s): rank 0 at" in str(error)
    assert os.listdir(error.dump_dir) == ["rank_0.txt"]
    # the handler is restored and a call within its deadline returns normally
    wg.workers[0].seconds = 0.1
    assert wg.work() == [0]


def test_ray_group_reports_a_worker_killed_during_a_phase_even_after_a_peer_failed(ray_cluster):
    pool = RayResourcePool([2], use_gpu=False)
    wg = RayWorkerGroup(pool, RayClassWithInitArgs(ray.remote(DyingWorker), 1), device_name="cpu")
    try:
        phase = "work_losing_a_peer"  # rank 0 fails at once (a collective without its peer), rank 1 dies a moment later
        wg.set_watchdog(Watchdog(timeout_s=60, memory_hints={phase: ["work.micro_batch_size_per_gpu"]}))
        with pytest.raises(WorkerLostError) as info:
            wg.work_losing_a_peer()
        error = info.value
        assert error.phase == phase and error.ranks == [1] and error.role == "DyingWorker"
        assert "Connection closed by peer" in str(error.__cause__)  # rank 0's error, kept as the cause
        message = str(error)
        assert f"DyingWorker worker rank 1 was lost during '{phase}'" in message
        # read on the worker's node from its heartbeat: the host's memory and the dead worker's own resident memory
        assert "Memory of the worker's node " in message and " now; at the last sample of worker process " in message
        sampled = r"s before it was lost: used [\d.]+ of [\d.]+ GiB \(\d+%\), the worker's resident memory"
        assert re.search(sampled, message), message
        node_id, pid, _ = wg._worker_processes[1]
        assert f"node {node_id[:8]} on " in message and f"worker process {pid}," in message
        # a worker on another node: a task pinned to its node reads it there (the sample was taken by the report above)
        remote = wg._memory_of([1], via_node_task=True)
        assert remote.startswith(f"of the worker's node {node_id[:8]} on ") and " GiB (" in remote, remote
        assert f"Settings that lower the memory of '{phase}': work.micro_batch_size_per_gpu." in message
        # without a watchdog the loss is reported the same way, without hints
        with pytest.raises(WorkerLostError, match="rank 1 was lost during 'work'"):
            wg.set_watchdog(None) or wg.work()
    finally:
        for worker in wg.workers:
            ray.kill(worker)
        for pg in pool.pgs or []:
            ray.util.remove_placement_group(pg)
