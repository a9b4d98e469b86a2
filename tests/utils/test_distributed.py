"""verl.utils.distributed: joining torchrun's process group from the env and leaving it."""

import os
import sys

import pytest
import torch
import torch.distributed as dist
import torch.multiprocessing as mp

from tests.gloo_ranks import free_port
from verl.utils.device import is_accelerator_available
from verl.utils.distributed import destroy_global_process_group, initialize_global_process_group


def _rank(rank: int, world: int, port: int, out_dir: str) -> None:
    os.environ.update(
        MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port), RANK=str(rank), LOCAL_RANK=str(rank), WORLD_SIZE=str(world)
    )
    ranks = initialize_global_process_group(timeout_second=120)
    assert initialize_global_process_group() == ranks  # joining twice keeps the group
    total = torch.tensor([rank + 1.0])
    dist.all_reduce(total)
    backend = dist.get_backend()
    destroy_global_process_group()
    left = not dist.is_initialized()
    destroy_global_process_group()  # nothing left to destroy: a no-op
    torch.save({"ranks": ranks, "total": total.item(), "backend": backend, "left": left}, f"{out_dir}/{rank}.pt")
    sys.stdout.flush()
    os._exit(0)  # skip interpreter teardown, as tests/gloo_ranks.py does


def test_initialize_and_destroy_global_process_group_on_two_ranks(tmp_path):
    mp.spawn(_rank, args=(2, free_port(), str(tmp_path)), nprocs=2, join=True)
    for rank in range(2):
        result = torch.load(tmp_path / f"{rank}.pt")
        assert result["ranks"] == (rank, rank, 2)  # (local_rank, rank, world_size)
        assert result["total"] == 3.0  # 1 + 2 summed over the group
        if not is_accelerator_available():
            assert result["backend"] == "gloo"
        assert result["left"]


def test_init_distributed_gives_the_group_the_timeout_it_is_asked_for(monkeypatch):
    """The policy worker's actor_rollout_ref.nccl_timeout becomes its process group's collective timeout."""
    from datetime import timedelta

    from verl.utils import distributed
    from verl.workers.roles import actor_rollout_ref as policy_worker
    from verl.workers.roles.actor_rollout_ref import ActorRolloutRefWorker

    calls = []
    monkeypatch.setattr(distributed.dist, "is_initialized", lambda: False)
    monkeypatch.setattr(distributed.dist, "init_process_group", lambda **kwargs: calls.append(kwargs))
    monkeypatch.setattr(distributed, "use_cpu_share", lambda: 1)
    for name, value in (("RANK", "0"), ("WORLD_SIZE", "1"), ("MASTER_ADDR", "127.0.0.1"), ("MASTER_PORT", "1")):
        monkeypatch.setenv(name, value)
    distributed.init_distributed(timeout_s=42)
    distributed.init_distributed()
    assert [c["timeout"] for c in calls] == [timedelta(seconds=42), None]  # None: torch's own default

    class Joined(Exception):
        pass

    def joined(timeout_s=None):
        calls.append(timeout_s)
        raise Joined

    monkeypatch.setattr(policy_worker, "init_distributed", joined)
    with pytest.raises(Joined):
        ActorRolloutRefWorker({"nccl_timeout": 7}, role="actor")
    assert calls[-1] == 7
