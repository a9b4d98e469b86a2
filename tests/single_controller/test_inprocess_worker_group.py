"""The in-process worker group: same worker classes, no Ray actors, same results as the Ray group."""

import pytest
import ray
import torch

from tests.single_controller.workers_for_tests import AddWorker, AsyncWorker, ProfiledWorker, SubWorker
from verl import DataProto
from verl.single_controller.inprocess import InProcessWorkerGroup
from verl.single_controller.ray import (
    RayClassWithInitArgs,
    RayResourcePool,
    RayWorkerGroup,
    create_colocated_worker_cls,
)


@pytest.fixture(scope="module", autouse=True)
def _leave_no_process_group():
    """The in-process workers form a gloo group in the pytest process; later tests expect none."""
    yield
    import torch.distributed as dist

    if dist.is_initialized():
        dist.destroy_process_group()


def test_inprocess_group_runs_registered_methods():
    wg = InProcessWorkerGroup(RayResourcePool([1], use_gpu=False), RayClassWithInitArgs(ray.remote(AddWorker), 5))
    assert wg.world_size == 1
    assert wg.env()[0]["WORLD_SIZE"] == "1"
    assert wg.add_scalar(1.0) == [6.0]
    assert wg.dp_compute(DataProto.from_dict({"x": torch.zeros(3)})).batch["x"].tolist() == [5, 5, 5]
    assert wg.double_later(DataProto.from_dict({"x": torch.ones(2)})).batch["x"].tolist() == [2, 2]
    async_wg = InProcessWorkerGroup(RayResourcePool([1], use_gpu=False), RayClassWithInitArgs(ray.remote(AsyncWorker)))
    assert async_wg.async_dp_compute(DataProto.from_dict({"x": torch.ones(2)})).batch["x"].tolist() == [2, 2]
    assert wg.all_reduce(2.0) == [2.0]  # a gloo group of one, formed in this process


def test_inprocess_equals_ray(ray_cluster):
    data = DataProto.from_dict({"x": torch.randn(6)})
    local = InProcessWorkerGroup(RayResourcePool([1], use_gpu=False), RayClassWithInitArgs(ray.remote(AddWorker), 3))
    pool = RayResourcePool([1], use_gpu=False)
    remote = RayWorkerGroup(pool, RayClassWithInitArgs(ray.remote(AddWorker), 3), device_name="cpu")
    try:
        assert torch.equal(local.dp_compute(data).batch["x"], remote.dp_compute(data).batch["x"])
        assert local.add_scalar(0.5) == remote.add_scalar(0.5)
    finally:
        ray.kill(remote.workers[0])
        ray.util.remove_placement_group(pool.pgs[0])


def test_inprocess_colocated_spawn():
    cls = create_colocated_worker_cls(
        {"add": RayClassWithInitArgs(ray.remote(AddWorker), 1), "sub": RayClassWithInitArgs(ray.remote(SubWorker), 2)}
    )
    wg = InProcessWorkerGroup(RayResourcePool([1], use_gpu=False), cls)
    groups = wg.spawn(prefix_set=["add", "sub"])
    data = DataProto.from_dict({"x": torch.zeros(2)})
    assert groups["add"].dp_compute(data).batch["x"].tolist() == [1, 1]
    assert groups["sub"].dp_compute(data).batch["x"].tolist() == [-2, -2]


def test_inprocess_rejects_bigger_pools():
    with pytest.raises(ValueError, match="exactly one worker"):
        InProcessWorkerGroup(RayResourcePool([2], use_gpu=False), RayClassWithInitArgs(ray.remote(AddWorker)))


def test_inprocess_and_ray_groups_share_a_backend_neutral_base():
    """Neither group subclasses the other: both derive from HandleWorkerGroup, which holds what they share."""
    from verl.single_controller.base import HandleWorkerGroup
    from verl.single_controller.ray import RayWorkerGroup

    assert not issubclass(InProcessWorkerGroup, RayWorkerGroup)
    assert issubclass(InProcessWorkerGroup, HandleWorkerGroup) and issubclass(RayWorkerGroup, HandleWorkerGroup)
    shared = ("spawn", "fuse", "execute_all_sync", "execute_rank_zero_sync", "world_size", "from_detached")
    assert all(name not in vars(InProcessWorkerGroup) and name not in vars(RayWorkerGroup) for name in shared)


def test_ray_base_keeps_verl_module_level_names():
    """Moving the shared code out of ray/base.py left its public helpers importable from there, unchanged."""
    from verl.single_controller.ray.base import func_generator, get_random_string, merge_resource_pool  # noqa: F401

    names = {get_random_string(12) for _ in range(4)}
    assert len(names) == 4 and all(len(n) == 12 and n.isalnum() and n.isascii() for n in names)


def test_profiler_extension_methods_reach_every_worker(tmp_path):
    """start_profile/stop_profile of verl's profiler mixin are group methods (registered by the controller)."""
    pool = RayResourcePool([1], use_gpu=False)
    wg = InProcessWorkerGroup(pool, RayClassWithInitArgs(ray.remote(ProfiledWorker), str(tmp_path)))
    wg.start_profile()
    assert wg.work() == [45]
    wg.stop_profile()
    traces = list(tmp_path.iterdir())
    assert [p.name for p in traces] == ["rank0_capture0.json"] and "work" in traces[0].read_text()
