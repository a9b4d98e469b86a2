"""FSDPUlyssesShardingManager: sp=1 is the identity; with sp=2 preprocess gathers the group, postprocess undoes it."""

import numpy as np
import torch

from tests.gloo_ranks import spawn_gloo_ranks
from verl.protocol import DataProto
from verl.workers.sharding_manager import BaseShardingManager, FSDPUlyssesShardingManager

WORLD = 2


def _shard(rank: int) -> DataProto:
    ids = torch.arange(6).view(3, 2) + 100 * rank
    return DataProto.from_dict(tensors={"ids": ids}, non_tensors={"tag": np.array([f"r{rank}-{i}" for i in range(3)])})


def test_base_and_sp1_are_identity():
    data = _shard(0)
    for manager in (BaseShardingManager(), FSDPUlyssesShardingManager(None)):
        assert manager.timing == {}
        with manager:
            assert manager.preprocess_data(data) is data
            assert manager.postprocess_data(data) is data


def _worker(rank: int):
    from torch.distributed.device_mesh import init_device_mesh

    mesh = init_device_mesh("cpu", (1, WORLD), mesh_dim_names=("dp", "sp"))
    manager = FSDPUlyssesShardingManager(mesh)
    data = manager.preprocess_data(_shard(rank))
    # every rank of the group now holds rank 0's rows then rank 1's rows
    expected = torch.cat([_shard(r).batch["ids"] for r in range(WORLD)])
    assert torch.equal(data.batch["ids"], expected)
    assert list(data.non_tensor_batch["tag"]) == [f"r{r}-{i}" for r in range(WORLD) for i in range(3)]
    back = manager.postprocess_data(data)
    assert torch.equal(back.batch["ids"], _shard(rank).batch["ids"])
    assert list(back.non_tensor_batch["tag"]) == list(_shard(rank).non_tensor_batch["tag"])


def test_sp2_gathers_the_group_and_returns_each_rank_its_shard():
    spawn_gloo_ranks(_worker, WORLD)
