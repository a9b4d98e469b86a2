"""The workers' compute methods are profiled phases: with ``profiler.discrete`` each call is its own capture."""

import os

import pytest

import verl.workers.roles.phases as phases
from verl import DataProto
from verl.single_controller.base.decorator import MAGIC_ATTR, Dispatch, register
from verl.utils.debug import DistProfiler, DistProfilerExtension, ProfilerConfig
from verl.workers.roles.actor_rollout_ref import ActorRolloutRefWorker
from verl.workers.roles.critic import CriticWorker
from verl.workers.roles.phases import compute_phase, is_compute_phase, reports_compute_time
from verl.workers.roles.reward_model import RewardModelWorker


class _Worker(DistProfilerExtension):
    def __init__(self, save_path: str, discrete: bool):
        DistProfilerExtension.__init__(
            self, DistProfiler(0, ProfilerConfig(discrete=discrete, ranks=[0], save_path=save_path))
        )

    @register(dispatch_mode=Dispatch.DP_COMPUTE_PROTO)
    @compute_phase
    @reports_compute_time
    def update_actor(self, data: DataProto) -> DataProto:
        return DataProto(meta_info={"n": 1})


def test_discrete_profiling_captures_each_phase_call_of_a_profiled_step(tmp_path):
    worker = _Worker(str(tmp_path), discrete=True)
    worker.update_actor(DataProto())  # not a profiled step: nothing captured
    assert not os.path.exists(tmp_path) or not os.listdir(tmp_path)
    worker.start_profile()
    out = worker.update_actor(DataProto())
    worker.update_actor(DataProto())
    worker.stop_profile()
    assert out.meta_info["n"] == 1 and "worker/update_actor" in out.meta_info["timing"]
    assert sorted(os.listdir(tmp_path)) == ["rank0_capture0.json", "rank0_capture1.json"]
    assert "update_actor" in (tmp_path / "rank0_capture0.json").read_text()


def test_a_step_capture_names_the_phase(tmp_path):
    worker = _Worker(str(tmp_path), discrete=False)
    worker.start_profile()
    worker.update_actor(DataProto())
    worker.stop_profile()
    assert os.listdir(tmp_path) == ["rank0_capture0.json"]
    assert "update_actor" in (tmp_path / "rank0_capture0.json").read_text()


def test_a_phase_hands_freed_host_memory_back_on_cpu_even_when_it_raises(monkeypatch):
    released = []
    monkeypatch.setattr(phases, "is_accelerator_available", lambda: False)
    monkeypatch.setattr(phases, "release_freed_host_memory", lambda: released.append(1))

    class Failing(_Worker):
        @compute_phase
        def generate_sequences(self, prompts):
            raise RuntimeError("boom")

    worker = Failing("/nonexistent", discrete=False)
    worker.update_actor(DataProto())
    with pytest.raises(RuntimeError, match="boom"):
        worker.generate_sequences(None)
    assert len(released) == 2


@pytest.mark.parametrize("worker_cls", [ActorRolloutRefWorker, CriticWorker, RewardModelWorker])
def test_every_data_parallel_method_of_the_fsdp_workers_is_a_compute_phase(worker_cls):
    methods = {
        name: method
        for name, method in vars(worker_cls).items()
        if getattr(method, MAGIC_ATTR, {}).get("dispatch_mode") == Dispatch.DP_COMPUTE_PROTO
    }
    assert methods  # the worker has compute methods at all
    assert [name for name, method in methods.items() if not is_compute_phase(method)] == []
