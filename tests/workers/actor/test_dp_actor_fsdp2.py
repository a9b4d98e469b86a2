"""DataParallelPPOActor on an FSDP2-sharded model, 2 processes over gloo, equals the single-process actor."""

import os
import sys

import pytest
import torch
import torch.distributed as dist

from tests.gloo_ranks import spawn_gloo_ranks

sys.path.insert(0, os.path.dirname(__file__))
from test_dp_actor import B, T, actor_config, log_prob_meta, rollout_batch, tiny_lm  # noqa: E402

from verl.workers.actor import DataParallelPPOActor  # noqa: E402

WORLD = 2
CONFIG = dict(
    loss_agg_mode="seq-mean-token-mean", grad_clip=1e6, use_remove_padding=True, ppo_micro_batch_size_per_gpu=1
)
# padded rows, a rank's three rows in one micro batch: each forward runs them in groups of like length
GROUPED = dict(CONFIG, use_remove_padding=False, ppo_micro_batch_size_per_gpu=B // WORLD)


def _batch(grouped: bool):
    """The rollout batch; grouped: reordered so rank 0's rows end at two distinct columns and rank 1's at three."""
    data = rollout_batch()
    if grouped:
        data.reorder(torch.tensor([0, 5, 1, 2, 3, 4]))
    return data


def _worker(rank: int, out_path: str, fused: bool, grouped: bool = False):
    torch.set_num_threads(1)
    from torch.distributed.device_mesh import init_device_mesh

    import verl.workers.engine.width_groups as width_groups
    from verl.utils.fsdp_utils import get_fsdp_full_state_dict, wrap_model_for_training

    if grouped:  # every split pays: the ranks want different numbers of groups and must agree on one
        width_groups.PER_CALL_TOKENS = 0

    mesh = init_device_mesh("cpu", (WORLD,), mesh_dim_names=("fsdp",))
    model = wrap_model_for_training(tiny_lm(), "fsdp2", mesh)
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    # The worker normalises the mini batch to per-rank samples: 6 rows over 2 ranks -> 3.
    config = actor_config(ppo_mini_batch_size=B // WORLD, use_fused_kernels=fused, **(GROUPED if grouped else CONFIG))
    actor = DataParallelPPOActor(config, model, opt)
    # on CPU the ranks gather once per mini batch and log-prob pass, and reduce once per mini batch: the update
    # below accumulates 3 micro batches that way and must still equal the single process's
    assert actor.engine._few_collectives and actor.engine._accumulation is not None
    shard = _batch(grouped).chunk(WORLD)[rank]
    data = log_prob_meta(shard, use_dynamic_bsz=True, max_token_len=11)
    log_probs, _ = actor.compute_log_prob(data)
    metrics = actor.update_policy(shard)
    state = get_fsdp_full_state_dict(model)
    gathered = [None] * WORLD
    dist.all_gather_object(gathered, log_probs)
    if rank == 0:
        torch.save({"log_probs": torch.cat(gathered), "state": state, "metrics": metrics}, out_path)


@pytest.mark.parametrize(
    "fused, grouped", [(False, False), (True, False), (False, True)], ids=["logits", "fused_head", "width_groups"]
)
def test_fsdp2_actor_matches_single_process(tmp_path, fused, grouped):
    """fused_head: the fused log-prob head reads the head's weight while FSDP2 has it unsharded and its gradient
    reaches the sharded parameter; the reference is the single-process actor on full logits. width_groups: padded
    rows run in groups of like length, as many forwards on each rank (else the last backward's reduce-scatters
    would not pair up and the ranks hang)."""
    if grouped:
        from verl.workers.engine.width_groups import width_groups

        wanted = [width_groups(s.batch["attention_mask"], T, per_call_tokens=0) for s in _batch(True).chunk(WORLD)]
        assert len({len(groups) for groups in wanted}) == WORLD  # the ranks disagree before they agree
    out = str(tmp_path / "out.pt")
    spawn_gloo_ranks(_worker, WORLD, out, fused, grouped)
    got = torch.load(out)

    model = tiny_lm()
    actor = DataParallelPPOActor(
        actor_config(ppo_mini_batch_size=B, **CONFIG), model, torch.optim.SGD(model.parameters(), lr=0.1)
    )
    ref_lp, _ = actor.compute_log_prob(log_prob_meta(_batch(grouped), micro_batch_size=B))
    mask = _batch(grouped).batch["attention_mask"][:, -ref_lp.shape[1] :].bool()
    torch.testing.assert_close(got["log_probs"][mask], ref_lp[mask], rtol=1e-5, atol=1e-5)
    actor.update_policy(_batch(grouped))
    for name, value in model.state_dict().items():
        torch.testing.assert_close(got["state"][name], value, rtol=1e-4, atol=1e-6, msg=name)
    assert all(torch.isfinite(torch.tensor(v)).all() for v in got["metrics"]["actor/grad_norm"])
