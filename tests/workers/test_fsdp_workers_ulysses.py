"""Ulysses sequence parallelism in the PPO workers: sp=2 on 2 gloo processes equals sp=1 (dp=2) on the same two.

Each run builds the real workers (``ActorRolloutRefWorker`` with actor, rollout and reference, and ``CriticWorker``)
from the ``ppo_trainer`` config, hands every rank its DP_COMPUTE_PROTO chunk of one batch (as the worker group
would), and concatenates the per-rank results in rank order (as the group's collect would). Log-probs, entropy,
reference log-probs and values must agree to 1e-5 and the gradients of the one optimizer step to 1e-4 (fp32).
"""

from __future__ import annotations

import pytest
import torch
import torch.distributed as dist

from tests.gloo_ranks import spawn_gloo_ranks
from tests.workers.gpu_actor_steps import PROMPT_LEN, RESPONSE_LEN, rollout_batch

BATCH_SEED = 2  # one micro batch packs an odd number of tokens (sp pads it), the other an even one


def _configs(model: str, critic: str, sp: int):
    from tests.trainer.ppo_e2e_utils import compose_config

    overrides = [
        f"actor_rollout_ref.model.path={model}",
        "actor_rollout_ref.model.use_remove_padding=True",
        "actor_rollout_ref.actor.strategy=fsdp2",
        "actor_rollout_ref.actor.optim.lr=1e-3",
        "actor_rollout_ref.actor.optim.total_training_steps=10",
        "actor_rollout_ref.actor.ppo_mini_batch_size=8",
        "actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu=4",
        "actor_rollout_ref.actor.use_kl_loss=True",
        "actor_rollout_ref.actor.entropy_coeff=0.01",
        "actor_rollout_ref.actor.grad_clip=1e6",
        f"actor_rollout_ref.actor.ulysses_sequence_parallel_size={sp}",
        "actor_rollout_ref.rollout.name=hf",
        "actor_rollout_ref.rollout.n=1",
        f"actor_rollout_ref.rollout.response_length={RESPONSE_LEN}",
        "actor_rollout_ref.rollout.log_prob_micro_batch_size_per_gpu=4",
        "actor_rollout_ref.ref.log_prob_micro_batch_size_per_gpu=4",
        f"critic.model.path={critic}",
        "critic.model.use_remove_padding=True",
        "critic.strategy=fsdp2",
        "critic.optim.total_training_steps=10",
        "critic.ppo_mini_batch_size=8",
        "critic.ppo_micro_batch_size_per_gpu=4",
        "critic.forward_micro_batch_size_per_gpu=4",
        "critic.grad_clip=1e6",
        f"critic.ulysses_sequence_parallel_size={sp}",
        f"data.max_response_length={RESPONSE_LEN}",
    ]
    config = compose_config(overrides)
    return config.actor_rollout_ref, config.critic


def _capture_grads(engine, module, optimizer_step_attr: str, into: dict):
    """Record the full (unsharded) gradients at the engine's optimizer step, then step as usual."""
    original = getattr(engine, optimizer_step_attr)

    def step():
        for name, param in module.named_parameters():
            grad = param.grad
            into[name] = (grad.full_tensor() if hasattr(grad, "full_tensor") else grad).detach().clone()
        return original()

    setattr(engine, optimizer_step_attr, step)


def _collect(part, world: int):
    """The worker group's DP_COMPUTE_PROTO collect: every rank's result, concatenated in rank order."""
    parts = [None] * world
    dist.all_gather_object(parts, part)
    return torch.cat(parts)


def _steps(rank: int, sp: int, model: str, critic: str, inputs: dict | None) -> dict:
    """Build the workers with ``ulysses_sequence_parallel_size=sp`` and run one PPO step's worker calls.

    ``inputs``: the old and reference log-probs the update reads (None: this run's own).
    """
    from verl import DataProto
    from verl.workers.roles.actor_rollout_ref import ActorRolloutRefWorker
    from verl.workers.roles.critic import CriticWorker

    world = dist.get_world_size()
    actor_cfg, critic_cfg = _configs(model, critic, sp)
    actor = ActorRolloutRefWorker(actor_cfg, role="actor_rollout_ref")
    actor.init_model()
    critic_worker = CriticWorker(critic_cfg)
    critic_worker.init_model()
    # train-mode values equal eval-mode ones only without dropout (HF's token-classification head defaults to 0.1)
    assert all(m.p == 0 for m in critic_worker.critic_module.modules() if isinstance(m, torch.nn.Dropout))

    full = rollout_batch(vocab=actor.hf_config.vocab_size, seed=BATCH_SEED)
    g = torch.Generator().manual_seed(7)
    full.batch["values"] = torch.randn(len(full), RESPONSE_LEN, generator=g)
    full.batch["returns"] = torch.randn(len(full), RESPONSE_LEN, generator=g)

    def shard(data: DataProto) -> DataProto:  # the DP_COMPUTE_PROTO dispatch: one chunk per rank, sp peers too
        return data.chunk(world)[rank]

    widths = []  # tokens per model call on this rank: a slice of the packed row under sp
    for module in (actor.actor_module, critic_worker.critic_module):
        module.register_forward_pre_hook(lambda m, a, kw: widths.append(kw["input_ids"].shape[-1]), with_kwargs=True)
    log_prob_out = actor.compute_log_prob(shard(full))
    result = {
        "old_log_probs": _collect(log_prob_out.batch["old_log_probs"], world),
        "entropys": _collect(log_prob_out.batch["entropys"], world),
        "ref_log_prob": _collect(actor.compute_ref_log_prob(shard(full)).batch["ref_log_prob"], world),
        "values": _collect(critic_worker.compute_values(shard(full)).batch["values"], world),
        "widths": list(widths),  # the static micro batches of 4 rows
        "actor_grads": {},
        "critic_grads": {},
    }
    # token-budget micro batches: the budget per rank is multiplied by sp (each rank holds 1/sp of every row)
    actor.config.rollout.log_prob_use_dynamic_bsz = True
    actor.config.rollout.log_prob_max_token_len_per_gpu = PROMPT_LEN + RESPONSE_LEN
    dynamic = actor.compute_log_prob(shard(full)).batch["old_log_probs"]
    result["dynamic_log_probs"] = _collect(dynamic, world)
    inputs = inputs or result
    full.batch["old_log_probs"] = inputs["old_log_probs"]
    full.batch["ref_log_prob"] = inputs["ref_log_prob"]
    _capture_grads(actor.actor, actor.actor_module, "_optimizer_step", result["actor_grads"])
    _capture_grads(critic_worker.critic, critic_worker.critic_module, "_optimizer_step", result["critic_grads"])
    result["actor/pg_loss"] = actor.update_actor(shard(full)).meta_info["metrics"]["actor/pg_loss"]
    result["critic/vf_loss"] = critic_worker.update_critic(shard(full)).meta_info["metrics"]["critic/vf_loss"]
    return result


def _run(rank: int, model: str, critic: str, out: str):
    torch.set_num_threads(1)
    # sp=1 on 2 ranks is dp=2: each rank updates on its 4 rows (one micro batch) and FSDP averages the two
    # gradients; sp=2 is dp=1: both ranks hold all 8 rows (two micro batches of 4, loss / 2 each). Same gradient.
    baseline = _steps(rank, 1, model, critic, None)
    sequence_parallel = _steps(rank, 2, model, critic, baseline)
    if rank == 0:
        torch.save({"sp1": baseline, "sp2": sequence_parallel}, out)


@pytest.fixture(scope="module")
def models(tmp_path_factory):
    from verl.demo.tiny_model import make_tiny_model_dir

    root = tmp_path_factory.mktemp("ulysses_workers")
    dims = dict(hidden_size=64, num_layers=2, num_heads=4, num_kv_heads=2, intermediate_size=128)
    return (
        make_tiny_model_dir(str(root / "actor"), **dims),
        make_tiny_model_dir(str(root / "critic"), head="token_classification", **dims),
        str(root / "result.pt"),
    )


def _max_diff(a: torch.Tensor, b: torch.Tensor, mask: torch.Tensor | None = None) -> float:
    if mask is not None:
        a, b = a[mask], b[mask]
    return (a.float() - b.float()).abs().max().item()


def test_sp2_workers_equal_sp1(models):
    model, critic, out = models
    full = rollout_batch(vocab=200, seed=BATCH_SEED)
    nnz = full.batch["attention_mask"].sum(-1)
    assert {int(nnz[:4].sum()) % 2, int(nnz[4:].sum()) % 2} == {0, 1}, "both sp paths: padded and not"

    spawn_gloo_ranks(_run, 2, model, critic, out)
    results = torch.load(out)
    ref, got = results["sp1"], results["sp2"]

    # sp=1, dp=2: rank 0 packs its 4 rows whole; sp=2: each micro batch's row padded to even, half per rank
    assert set(ref["widths"]) == {int(nnz[:4].sum())}
    assert set(got["widths"]) == {(int(nnz[:4].sum()) + 1) // 2, (int(nnz[4:].sum()) + 1) // 2}
    mask = full.batch["attention_mask"][:, PROMPT_LEN:].bool()
    keys = ("old_log_probs", "entropys", "ref_log_prob", "dynamic_log_probs")
    diffs = {key: _max_diff(got[key], ref[key], mask) for key in keys}
    diffs["dynamic_vs_static"] = _max_diff(got["dynamic_log_probs"], got["old_log_probs"], mask)
    diffs["values"] = _max_diff(got["values"], ref["values"])  # zero past each response in both
    for kind in ("actor_grads", "critic_grads"):
        assert got[kind].keys() == ref[kind].keys() and ref[kind]
        diffs[kind] = max(_max_diff(got[kind][name], g) for name, g in ref[kind].items())
        # the update moved something: gradients are not all zero
        assert max(g.abs().max().item() for g in ref[kind].values()) > 1e-3
    print("max abs diff sp=2 vs sp=1:", diffs)
    for key in (*keys, "dynamic_vs_static", "values"):
        assert diffs[key] < 1e-5, (key, diffs[key])
    for key in ("actor_grads", "critic_grads"):
        assert diffs[key] < 1e-4, (key, diffs[key])
    # rank 0's micro batch at sp=1 (rows 0-3) is the first of the two at sp=2
    for key in ("actor/pg_loss", "critic/vf_loss"):
        assert len(ref[key]) == 1 and len(got[key]) == 2
        assert abs(got[key][0] - ref[key][0]) < 1e-5, (key, got[key], ref[key])
