"""RayWorkerGroup on CPU bundles: env, dispatch modes, futures, padding, colocation, fusion, torch.distributed."""

import pytest
import ray
import torch

from tests.single_controller.workers_for_tests import AddWorker, AsyncWorker, SlowRankZeroWorker, SubWorker
from verl import DataProto
from verl.protocol import DataProtoConfig, DataProtoFuture
from verl.single_controller.base import Worker
from verl.single_controller.base.decorator import Dispatch, register
from verl.single_controller.ray import (
    RayClassWithInitArgs,
    RayResourcePool,
    RayWorkerGroup,
    create_colocated_worker_cls,
    create_colocated_worker_cls_fused,
)
from verl.single_controller.ray.base import create_colocated_worker_raw_cls


def make_group(n=2, cls=AddWorker, **init):
    pool = RayResourcePool([n], use_gpu=False)
    return RayWorkerGroup(pool, RayClassWithInitArgs(ray.remote(cls), **init), device_name="cpu"), pool


def release(*pairs):
    """Kill the workers and free their placement groups (the test cluster has 4 CPUs)."""
    for wg, pool in pairs:
        for worker in wg.workers:
            ray.kill(worker)
        for pg in pool.pgs or []:
            ray.util.remove_placement_group(pg)


@pytest.fixture(scope="module")
def group(ray_cluster):
    wg, pool = make_group(2, initial_value=10)
    yield wg
    release((wg, pool))


def test_worker_environment(group):
    envs = group.env()
    assert [e["RANK"] for e in envs] == ["0", "1"]
    assert all(e["WORLD_SIZE"] == "2" and e["WG_BACKEND"] == "ray" for e in envs)
    assert {e["RAY_LOCAL_RANK"] for e in envs} == {"0", "1"} and {e["RAY_LOCAL_WORLD_SIZE"] for e in envs} == {"2"}
    # the worker reads its host placement as LOCAL_*: a CPU worker's share of the cores (distributed.cpu_share) and
    # the number of engines on the host come from it; "1" made each of two workers take every core
    assert {e["LOCAL_RANK"] for e in envs} == {"0", "1"} and {e["LOCAL_WORLD_SIZE"] for e in envs} == {"2"}
    assert envs[0]["MASTER_PORT"] == envs[1]["MASTER_PORT"] == group.master_port
    assert group.world_size == 2 and len(group.worker_names) == 2


def test_every_rank_starts_without_waiting_for_rank_zero(ray_cluster):
    """The group starts all its ranks at once; the others wait for rank 0's address in their own constructors, so
    rank 0's start-up (its imports) is not paid once more before the next rank's begins."""
    wg, pool = make_group(2, SlowRankZeroWorker)
    try:
        (began0, known0, port0), (began1, _, port1) = wg.times()
        # rank 1 was under way before rank 0 had published its address (the old order began it only after rank 0's
        # center was up, and then a process start-up later): no bound on how fast either process starts
        assert began1 < known0
        assert port0 == port1 == wg.master_port  # and it joined rank 0's rendezvous all the same
    finally:
        release((wg, pool))


def test_a_rendezvous_address_in_the_environment_does_not_override_rank_zeros(ray_cluster):
    """A MASTER_ADDR/MASTER_PORT the workers inherit (a shell under torchrun or SLURM, or an earlier in-process group
    in the driver) is replaced by rank 0's address on every rank."""
    cls = RayClassWithInitArgs(ray.remote(AddWorker), initial_value=0)
    cls.update_options({"runtime_env": {"env_vars": {"MASTER_ADDR": "192.0.2.1", "MASTER_PORT": "1"}}})
    pool = RayResourcePool([2], use_gpu=False)
    wg = RayWorkerGroup(pool, cls, device_name="cpu")
    try:
        envs = wg.env()
        assert envs[0]["MASTER_PORT"] == envs[1]["MASTER_PORT"] == wg.master_port != "1"
        assert envs[0]["MASTER_ADDR"] == envs[1]["MASTER_ADDR"] == wg.master_address != "192.0.2.1"
    finally:
        release((wg, pool))


def test_env_vars_set_on_the_class_reach_every_worker(ray_cluster):
    """A trainer's actor options (``_worker_actor_options``: the host's worker count for the CPU share) are merged
    with the group's own variables, not replaced by them."""
    cls = RayClassWithInitArgs(ray.remote(AddWorker), initial_value=0)
    cls.update_options({"runtime_env": {"env_vars": {"VERL_HOST_WORKERS": "3"}}})
    pool = RayResourcePool([1], use_gpu=False)
    wg = RayWorkerGroup(pool, cls, device_name="cpu")
    try:
        (env,) = wg.env()
        assert env["VERL_HOST_WORKERS"] == "3" and env["RANK"] == "0" and env["WG_BACKEND"] == "ray"
    finally:
        release((wg, pool))


def test_dp_compute_proto_splits_in_rank_order(group):
    out = group.dp_compute(DataProto.from_dict({"x": torch.zeros(4)}))
    assert out.batch["x"].tolist() == [10, 10, 11, 11]
    assert out.meta_info == {"rank": 0}  # first worker's meta survives concat


def test_other_dispatch_modes(group):
    assert group.add_scalar(1.0) == [11.0, 12.0]
    assert group.per_worker([1.0, 2.0]) == [10.0, 21.0]  # per-worker list is split by execute_all
    assert group.per_worker(1.0) == [10.0, 11.0]  # anything else is broadcast
    assert group.dp_list([[1, 2], [3]]) == [3, 3]
    assert group.metric(DataProto.from_dict({"x": torch.ones(4)})) == [2.0, 2.0]
    assert group.rank_zero_only() == 0
    with pytest.raises(AssertionError, match="length 2"):
        group.dp_list([[1]])


def test_non_blocking_returns_future(group):
    future = group.double_later(DataProto.from_dict({"x": torch.arange(4.0)}))
    assert isinstance(future, DataProtoFuture)
    # a future passes straight into another call, which materialises it on the workers
    out = group.dp_compute(future)
    assert out.batch["x"].tolist() == [10, 12, 15, 17]
    assert future.get().batch["x"].tolist() == [0, 2, 4, 6]


def test_async_method_non_blocking(ray_cluster):
    wg, pool = make_group(2, AsyncWorker)
    try:
        future = wg.async_dp_compute(DataProto.from_dict({"x": torch.arange(4.0)}))
        assert isinstance(future, DataProtoFuture)
        assert future.get().batch["x"].tolist() == [0, 2, 4, 6]
    finally:
        release((wg, pool))


def test_auto_padding(group):
    release_later = []
    try:
        wg, pool = make_group(2, initial_value=0)
        release_later.append((wg, pool))
        wg4 = RayWorkerGroup.from_detached(
            worker_handles=wg.workers * 2, ray_cls_with_init=RayClassWithInitArgs(ray.remote(AddWorker))
        )  # world size 4 over two actors: enough to exercise padding to a multiple of 4
        for rows in (10, 1, 8):
            data = DataProto.from_dict({"x": torch.arange(float(rows))}, auto_padding=True)
            out = wg4.dp_compute(data)
            assert len(out) == rows and out.batch["x"].tolist()[:1] == [0.0]
            DataProtoConfig.auto_padding = True
            try:
                assert len(wg4.dp_compute(DataProto.from_dict({"x": torch.arange(float(rows))}))) == rows
            finally:
                DataProtoConfig.auto_padding = False
        with pytest.raises(AssertionError, match="equal chunk"):
            wg4.dp_compute(DataProto.from_dict({"x": torch.arange(10.0)}))
    finally:
        release(*release_later)


def test_torch_distributed_group_inside_workers(ray_cluster):
    wg, pool = make_group(2)
    try:
        # rank r contributes 3 * (r + 1): 3 + 6
        assert wg.all_reduce(3.0) == [9.0, 9.0]
    finally:
        release((wg, pool))


def test_colocated_equals_separate(ray_cluster):
    data = DataProto.from_dict({"x": torch.arange(4.0)})
    add, add_pool = make_group(2, AddWorker, initial_value=1)
    separate_add = add.dp_compute(data)
    release((add, add_pool))
    sub, sub_pool = make_group(2, SubWorker, initial_value=2)
    separate_sub = sub.dp_compute(data)
    release((sub, sub_pool))
    cls = create_colocated_worker_cls(
        {
            "add": RayClassWithInitArgs(ray.remote(AddWorker), initial_value=1),
            "sub": RayClassWithInitArgs(ray.remote(SubWorker), initial_value=2),
        }
    )
    pool = RayResourcePool([2], use_gpu=False)
    wg = RayWorkerGroup(pool, cls, device_name="cpu")
    try:
        spawned = wg.spawn(prefix_set={"add", "sub"})
        assert torch.equal(spawned["add"].dp_compute(data).batch["x"], separate_add.batch["x"])
        assert torch.equal(spawned["sub"].dp_compute(data).batch["x"], separate_sub.batch["x"])
        fut = spawned["add"].double_later(data)
        assert fut.get().batch["x"].tolist() == [0, 2, 4, 6]
    finally:
        release((wg, pool))


def test_fused_worker(ray_cluster):
    class_dict = {
        "actor": RayClassWithInitArgs(ray.remote(AddWorker), initial_value=1),
        "critic": RayClassWithInitArgs(ray.remote(SubWorker), initial_value=2),
    }
    raw = create_colocated_worker_raw_cls(class_dict)

    class HybridWorker(raw):
        @register(dispatch_mode=Dispatch.ONE_TO_ALL)
        def foo(self, x):
            return self.critic.sub(self.actor.add_scalar(x))

    fused = RayClassWithInitArgs(cls=ray.remote(HybridWorker))
    fused.fused_worker_used = True
    pool = RayResourcePool([2], use_gpu=False)
    wg = RayWorkerGroup(pool, fused, device_name="cpu")
    try:
        wg.fuse(class_dict.keys())
        actor_out = wg.actor.add_scalar(0.1)
        critic_out = wg.critic.sub(actor_out)
        assert actor_out == pytest.approx([1.1, 2.1])
        assert wg.foo(0.1) == pytest.approx(critic_out)
        assert create_colocated_worker_cls_fused(class_dict).fused_worker_used
    finally:
        release((wg, pool))


def test_from_detached(group):
    attached = RayWorkerGroup.from_detached(
        worker_handles=group.workers, ray_cls_with_init=RayClassWithInitArgs(ray.remote(AddWorker))
    )
    assert attached.world_size == 2 and attached.add_scalar(0.0) == [10.0, 11.0]
    with pytest.raises(AssertionError):
        RayWorkerGroup(RayResourcePool([1], use_gpu=False), worker_names=["x"])


def test_worker_outside_group_explains(monkeypatch):
    for key in ("WORLD_SIZE", "RANK", "MASTER_ADDR", "MASTER_PORT", "WG_PREFIX"):
        monkeypatch.delenv(key, raising=False)
    with pytest.raises(RuntimeError, match="WORLD_SIZE"):
        Worker()
