"""The tiny model, data and dense reward the SPIN tests share (built once per test module)."""

import pytest
import torch.distributed as dist

from tests.trainer.ppo_e2e_utils import make_workspace, write_reward_fn


@pytest.fixture(scope="module")
def workspace(tmp_path_factory):
    root = tmp_path_factory.mktemp("spin")
    ws = make_workspace(root)
    ws["reward"] = write_reward_fn(root)
    yield ws
    # the in-process worker joined a one-rank process group; leave none behind for the next module
    if dist.is_initialized():
        dist.destroy_process_group()
