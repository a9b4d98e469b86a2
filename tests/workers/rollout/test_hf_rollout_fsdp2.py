"""HFRollout on an FSDP2-sharded model: ranks that generate different numbers of steps must not deadlock."""

import os
import sys

import torch
import torch.distributed as dist

from tests.gloo_ranks import spawn_gloo_ranks

sys.path.insert(0, os.path.dirname(__file__))
from test_hf_rollout import prompts, rollout_config, tiny_lm  # noqa: E402

from verl.workers.rollout import HFRollout  # noqa: E402

WORLD = 2
LENGTHS = (2, 6)  # rank r generates LENGTHS[r] tokens: a different number of forward passes per rank


def _worker(rank: int, out_path: str):
    torch.set_num_threads(1)
    from torch.distributed.device_mesh import init_device_mesh

    from verl.utils.fsdp_utils import wrap_model_for_training

    mesh = init_device_mesh("cpu", (WORLD,), mesh_dim_names=("fsdp",))
    model = wrap_model_for_training(tiny_lm(), "fsdp2", mesh)
    rollout = HFRollout(model, rollout_config(response_length=LENGTHS[rank], micro_batch_size=2))
    out = rollout.generate_sequences(prompts(do_sample=False))
    # Sharded training still works after the rollout (parameters were resharded).
    model.train()
    model(input_ids=out.batch["input_ids"], use_cache=False).logits.sum().backward()
    results = [None] * WORLD
    dist.all_gather_object(results, out.batch["responses"])
    if rank == 0:
        torch.save(results, out_path)


def test_fsdp2_generation_with_uneven_steps_matches_single_process(tmp_path):
    out = str(tmp_path / "out.pt")
    spawn_gloo_ranks(_worker, WORLD, out)
    got = torch.load(out)
    model = tiny_lm()
    for rank, length in enumerate(LENGTHS):
        ref = HFRollout(model, rollout_config(response_length=length)).generate_sequences(prompts(do_sample=False))
        assert torch.equal(got[rank], ref.batch["responses"])
