"""Roles of one worker process at different Megatron parallel sizes, and beside FSDP roles, on 2 gloo processes.

In the same two processes: a Megatron actor at tensor parallel 2 with its reference at pipeline parallel 2 (one
worker), a Megatron critic at pipeline parallel 2, a Megatron reward model at tensor x pipeline 1 (data parallel 2),
and the FSDP2 actor, reference, critic and reward model as the reference (so each Megatron role also runs beside FSDP
roles of the other kinds). Each role's results must equal the FSDP2 one's to 1e-4: log-probs, reference log-probs,
values before and after one critic update, scores. The actor's log-probs computed
again after the other roles have run (each switching megatron-core's groups to its own) must be bit-identical.
"""

from __future__ import annotations

import pytest
import torch

pytest.importorskip("megatron.core", reason="megatron-core is not installed (pip install -e .[megatron])")

from tests.gloo_ranks import spawn_gloo_ranks  # noqa: E402
from tests.workers.engine.megatron.test_megatron_critic import CRITIC_BATCHES_AND_OPTIM, _collect  # noqa: E402
from tests.workers.engine.megatron.test_megatron_critic import _critic_batch as _batch  # noqa: E402
from tests.workers.gpu_actor_steps import PROMPT_LEN, RESPONSE_LEN  # noqa: E402

WORLD = 2
# (tensor, pipeline) per Megatron role section
SIZES = {
    "actor_rollout_ref.actor": (2, 1),
    "actor_rollout_ref.ref": (1, 2),
    "critic": (1, 2),
    "reward_model": (1, 1),
}


def _config(models: dict, megatron: bool):
    from tests.trainer.ppo_e2e_utils import compose_config

    strategy = "megatron" if megatron else "fsdp2"
    overrides = [
        f"actor_rollout_ref.model.path={models['actor']}",
        f"actor_rollout_ref.actor.strategy={strategy}",
        "actor_rollout_ref.rollout.name=hf",
        "actor_rollout_ref.rollout.n=1",
        f"actor_rollout_ref.rollout.response_length={RESPONSE_LEN}",
        "actor_rollout_ref.rollout.log_prob_micro_batch_size_per_gpu=4",
        "actor_rollout_ref.ref.log_prob_micro_batch_size_per_gpu=4",
        f"critic.model.path={models['critic']}",
        f"critic.strategy={strategy}",
        *CRITIC_BATCHES_AND_OPTIM,
        "reward_model.enable=True",
        f"reward_model.model.path={models['rm']}",
        f"reward_model.strategy={strategy}",
        "reward_model.micro_batch_size_per_gpu=4",
        f"data.max_response_length={RESPONSE_LEN}",
    ]
    if megatron:
        for section, (tp, pp) in SIZES.items():
            overrides += [
                f"{section}.megatron.tensor_model_parallel_size={tp}",
                f"{section}.megatron.pipeline_model_parallel_size={pp}",
                f"{section}.megatron.sequence_parallel=False",
                f"{section}.megatron.use_distributed_optimizer=False",
            ]
    return compose_config(overrides, "ppo_megatron_trainer" if megatron else "ppo_trainer")


def _workers(config):
    from verl.workers.roles.actor_rollout_ref import ActorRolloutRefWorker
    from verl.workers.roles.critic import CriticWorker
    from verl.workers.roles.reward_model import RewardModelWorker

    workers = (ActorRolloutRefWorker(config.actor_rollout_ref, role="actor_rollout_ref"), CriticWorker(config.critic))
    workers += (RewardModelWorker(config.reward_model),)
    for worker in workers:
        worker.init_model()
    return workers


def _run(rank: int, models: dict, out: str):
    torch.set_num_threads(1)
    full = _batch()
    shard = full.chunk(WORLD)[rank]
    results = {}
    roles = {"fsdp": _workers(_config(models, False)), "megatron": _workers(_config(models, True))}
    for name, (actor, critic, rm) in roles.items():
        result = results[name] = {"log_probs": _collect(actor.compute_log_prob(shard).batch["old_log_probs"])}
        result["ref_log_prob"] = _collect(actor.compute_ref_log_prob(shard).batch["ref_log_prob"])
        result["values"] = _collect(critic.compute_values(shard).batch["values"])
        result["rm_scores"] = _collect(rm.compute_rm_score(shard).batch["rm_scores"])
    for name, (actor, critic, _) in roles.items():  # the update after every role has run once
        result = results[name]
        data = full.chunk(WORLD)[rank]
        data.batch["values"] = result["values"].chunk(WORLD)[rank]
        critic.update_critic(data)
        result["values_after"] = _collect(critic.compute_values(shard).batch["values"])
        result["log_probs_again"] = _collect(actor.compute_log_prob(shard).batch["old_log_probs"])
    if rank == 0:
        torch.save(results, out)


def test_roles_at_their_own_parallel_sizes_equal_fsdp(models, tmp_path):
    out = str(tmp_path / "result.pt")
    spawn_gloo_ranks(_run, WORLD, models, out)
    results = torch.load(out)
    ref, got = results["fsdp"], results["megatron"]
    full = _batch()
    response_mask = full.batch["response_mask"].bool()
    tokens = full.batch["attention_mask"][:, PROMPT_LEN:].bool()
    mask = {"log_probs": tokens, "ref_log_prob": tokens, "values": response_mask}
    mask["values_after"] = response_mask
    diffs = {key: (got[key] - ref[key])[m].abs().max().item() for key, m in mask.items()}
    diffs["rm_scores"] = (got["rm_scores"] - ref["rm_scores"]).abs().max().item()
    print("megatron (actor tp2, ref pp2, critic pp2, rm dp2) vs fsdp2:", diffs)
    moved = (ref["values_after"] - ref["values"])[response_mask].abs().max().item()
    assert moved > 1e-2 and ref["rm_scores"].abs().max() > 1e-3  # the update moved the values; scores are not zero
    assert all(value < 1e-4 for value in diffs.values()), diffs
    for result in (got, ref):
        assert torch.equal(result["log_probs_again"], result["log_probs"])
