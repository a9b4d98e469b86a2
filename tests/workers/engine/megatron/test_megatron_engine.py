"""The Megatron engine behind the real actor / rollout / reference worker equals the FSDP2 engine, on 2 gloo processes.

Each run builds ``ActorRolloutRefWorker`` twice in the same two processes: from the ``ppo_trainer`` config with
``strategy=fsdp2`` (data parallel 2), and from ``ppo_megatron_trainer`` (``strategy=megatron``) at tensor parallel 2
or pipeline parallel 2 (data parallel 1). Every rank gets its DP_COMPUTE_PROTO chunk of one batch (as the worker
group dispatches) and the per-rank results are concatenated in rank order (as it collects).

Further cases on the same pattern: pipeline parallel 2 with two virtual stages per rank (a four-layer model), and a
Qwen3-MoE model at pipeline parallel 2 and at expert parallel 2 (each rank two of the four experts; the two ranks run
the same rows, the experts' tokens gathered by megatron-core's allgather dispatcher over gloo), and at tensor parallel
2 with sequence parallelism (the experts split over the two ranks).

Log-probs (static and token-budget micro batches), entropy and reference log-probs must agree to 1e-4. In one PPO
update (KL loss, entropy bonus, gradient clipping active) the gradients at the optimizer step, gathered to full
HF-named tensors by the hand-off stream, must agree with FSDP's to 1e-5 relative to the largest gradient, and so
must the norm the step clips by. The parameters after the step agree less tightly: AdamW's first step moves each
parameter by about lr * g / (|g| + eps), so a gradient at float-noise level (~1e-9) moves its parameter by an
arbitrary fraction of lr in either engine; they must agree to 5% of the update, the whole model to 2e-5 of its norm,
and each tensor to 1e-5 of its norm over the entries whose gradient is above that noise. The HF rollout's model,
filled by the hand-off, must hold the Megatron parameters exactly.

A checkpoint saved after the update restores them exactly, the next update after that resume equals the
uninterrupted one bit for bit, and its ``huggingface/`` folder loads in transformers with the same weights, as does
the folder the model merger (``--backend megatron``) writes from its ``dist_ckpt/`` (megatron-core's layout).
At tensor parallel 2 the worker runs both without and with sequence parallelism (the YAML's default), which must
agree with each other to 1e-5.
"""

from __future__ import annotations

import pytest
import torch
import torch.distributed as dist

pytest.importorskip("megatron.core", reason="megatron-core is not installed (pip install -e .[megatron])")

from tests.gloo_ranks import spawn_gloo_ranks  # noqa: E402
from tests.workers.gpu_actor_steps import PROMPT_LEN, RESPONSE_LEN, rollout_batch  # noqa: E402

WORLD = 2


def _config(
    model: str, strategy: str, tp: int, pp: int, vpp: int | None = None, ep: int = 1, sequence_parallel: bool = False
):
    from tests.trainer.ppo_e2e_utils import compose_config

    overrides = [
        f"actor_rollout_ref.model.path={model}",
        f"actor_rollout_ref.actor.strategy={strategy}",
        "actor_rollout_ref.actor.optim.lr=1e-2",
        "actor_rollout_ref.actor.optim.total_training_steps=10",
        "actor_rollout_ref.actor.ppo_mini_batch_size=8",
        "actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu=4",
        "actor_rollout_ref.actor.use_kl_loss=True",
        "actor_rollout_ref.actor.entropy_coeff=0.01",
        "actor_rollout_ref.actor.grad_clip=0.5",
        "actor_rollout_ref.actor.checkpoint.save_contents=[model,optimizer,extra,hf_model]",
        "actor_rollout_ref.rollout.name=hf",
        "actor_rollout_ref.rollout.n=1",
        f"actor_rollout_ref.rollout.response_length={RESPONSE_LEN}",
        "actor_rollout_ref.rollout.log_prob_micro_batch_size_per_gpu=4",
        "actor_rollout_ref.ref.log_prob_micro_batch_size_per_gpu=4",
        f"data.max_response_length={RESPONSE_LEN}",
    ]
    if strategy == "megatron":
        overrides += [
            f"actor_rollout_ref.actor.megatron.tensor_model_parallel_size={tp}",
            f"actor_rollout_ref.actor.megatron.pipeline_model_parallel_size={pp}",
            f"actor_rollout_ref.actor.megatron.sequence_parallel={sequence_parallel}",
            "actor_rollout_ref.actor.megatron.use_distributed_optimizer=False",
            f"actor_rollout_ref.ref.megatron.tensor_model_parallel_size={tp}",
            f"actor_rollout_ref.ref.megatron.pipeline_model_parallel_size={pp}",
            f"actor_rollout_ref.actor.megatron.virtual_pipeline_model_parallel_size={vpp or 'null'}",
            f"actor_rollout_ref.ref.megatron.virtual_pipeline_model_parallel_size={vpp or 'null'}",
            f"actor_rollout_ref.actor.megatron.expert_model_parallel_size={ep}",
            f"actor_rollout_ref.ref.megatron.expert_model_parallel_size={ep}",
            f"actor_rollout_ref.ref.megatron.sequence_parallel={sequence_parallel}",
            "actor_rollout_ref.ref.megatron.use_distributed_optimizer=False",
        ]
    config_name = "ppo_megatron_trainer" if strategy == "megatron" else "ppo_trainer"
    return compose_config(overrides, config_name).actor_rollout_ref


def _collect(part: torch.Tensor) -> torch.Tensor:
    parts = [None] * WORLD
    dist.all_gather_object(parts, part)
    return torch.cat(parts)


def _checkpoint_names(module, state: dict) -> dict:
    """``state`` (``module``'s in-memory names) in the checkpoint's names, as the Megatron stream yields them:
    transformers >= 5 fuses a mixture of experts' weights in memory."""
    from verl.workers.sharding_manager.fsdp_weights import checkpoint_layout

    to_checkpoint = checkpoint_layout(module)
    if to_checkpoint is None:
        return state
    return {k: t for n, v in state.items() for k, t in to_checkpoint(n, v)}


def _is_megatron(engine) -> bool:
    # both engines stream HF-named weights (hf_weights) now; only Megatron averages gradients itself
    return hasattr(engine, "_reduce_gradients")


def _full_grads(engine) -> dict[str, torch.Tensor]:
    """The gradients as full HF-named tensors (Megatron: through the hand-off stream, gradients in place of data)."""
    if not _is_megatron(engine):
        grads = {n: p.grad.full_tensor().clone() for n, p in engine.module.named_parameters()}
        return _checkpoint_names(engine.module, grads)
    data = {}
    for p in engine.module.parameters():
        data[p] = p.data
        p.data = p.grad.clone()
    grads = {name: t.clone() for name, t in engine.hf_weights()}
    for p, d in data.items():
        p.data = d
    return grads


def _capture_grads(engine, into: dict) -> None:
    """Record the full gradients of the first update where the engine's step reads them: FSDP's right away,
    Megatron's once it has averaged them over data-parallel replicas."""
    name = "_reduce_gradients" if _is_megatron(engine) else "optimizer_step"
    original = getattr(engine, name)

    def wrapped():
        if name == "_reduce_gradients":
            original()
        if not into:
            into.update(_full_grads(engine))
        return None if name == "_reduce_gradients" else original()

    setattr(engine, name, wrapped)


def _full_params(worker) -> dict[str, torch.Tensor]:
    engine = worker.actor_engine
    if _is_megatron(engine):
        return {name: t.clone() for name, t in engine.hf_weights()}
    state = engine.module.state_dict()
    full = {k: (v.full_tensor() if hasattr(v, "full_tensor") else v).detach().clone() for k, v in state.items()}
    return _checkpoint_names(engine.module, full)


def _steps(
    rank: int,
    model: str,
    strategy: str,
    tp: int,
    pp: int,
    ckpt: str | None = None,
    vpp=None,
    ep=1,
    sequence_parallel: bool = False,
) -> dict:
    from verl.workers.roles.actor_rollout_ref import ActorRolloutRefWorker

    config = _config(model, strategy, tp, pp, vpp, ep, sequence_parallel)
    worker = ActorRolloutRefWorker(config, role="actor_rollout_ref")
    worker.init_model()
    full = rollout_batch(vocab=worker.hf_config.vocab_size, seed=3)
    shard = full.chunk(WORLD)[rank]
    log_prob_out = worker.compute_log_prob(shard)
    result = {
        "old_log_probs": _collect(log_prob_out.batch["old_log_probs"]),
        "entropys": _collect(log_prob_out.batch["entropys"]),
        "ref_log_prob": _collect(worker.compute_ref_log_prob(shard).batch["ref_log_prob"]),
        "before": _full_params(worker),
    }
    # token-budget micro batches (each holds whole rows of the gathered batch; pipeline stages split them alike)
    worker.config.rollout.log_prob_use_dynamic_bsz = True
    worker.config.rollout.log_prob_max_token_len_per_gpu = PROMPT_LEN + RESPONSE_LEN
    result["dynamic_log_probs"] = _collect(worker.compute_log_prob(shard).batch["old_log_probs"])
    worker.config.rollout.log_prob_use_dynamic_bsz = False
    full.batch["old_log_probs"] = result["old_log_probs"]
    full.batch["ref_log_prob"] = result["ref_log_prob"]
    result["grads"] = {}
    _capture_grads(worker.actor_engine, result["grads"])
    metrics = worker.update_actor(full.chunk(WORLD)[rank]).meta_info["metrics"]
    result["grad_norm"] = metrics["actor/grad_norm"]
    result["pg_loss"] = metrics["actor/pg_loss"]
    result["after"] = _full_params(worker)
    if strategy == "megatron":  # the HF rollout's own model, filled by the hand-off
        result["sequence_parallel"] = worker.actor_engine.module.config.sequence_parallel
        module, handoff = worker.actor_engine.hf_rollout_module()
        with handoff:
            result["rollout"] = _checkpoint_names(
                module, {k: v.detach().clone() for k, v in module.state_dict().items()}
            )
        update = lambda: worker.update_actor(full.chunk(WORLD)[rank])  # noqa: E731
        if ckpt is not None:
            result.update(exact_resume(worker, update, lambda: _full_params(worker), result["after"], ckpt))
    return result


def exact_resume(worker, update, params, after: dict, ckpt: str) -> dict:
    """Save ``worker`` (whose parameters are ``after``) to ``ckpt``, ``update()`` again, restore, ``update()`` again:
    whether the restore and the update after it are exact, and how far the second update moved (``params()``: the
    full HF-named parameters)."""
    worker.save_checkpoint(ckpt, global_step=1)
    update()
    second = params()
    worker.load_checkpoint(ckpt)
    restored = params()
    update()
    resumed = params()
    return {
        "restored_exact": all(torch.equal(restored[k], after[k]) for k in restored),
        "resumed_exact": all(torch.equal(resumed[k], second[k]) for k in second),
        "second_moved": max((second[k] - after[k]).abs().max().item() for k in second),
    }


def _run(rank: int, model: str, tp: int, pp: int, vpp: int | None, ep: int, out: str, ckpt: str, no_sp: bool):
    torch.set_num_threads(1)
    results = {"fsdp": _steps(rank, model, "fsdp2", 1, 1)}
    if no_sp:  # tensor parallelism without sequence parallelism, then with it (the YAML's default) and the checkpoint
        results["megatron_no_sp"] = _steps(rank, model, "megatron", tp, pp, None, vpp, ep)
    results["megatron"] = _steps(rank, model, "megatron", tp, pp, ckpt, vpp, ep, sequence_parallel=tp > 1)
    if rank == 0:
        torch.save(results, out)


@pytest.fixture(scope="module")
def model(tmp_path_factory):
    from verl.demo.tiny_model import make_tiny_model_dir

    return make_tiny_model_dir(str(tmp_path_factory.mktemp("megatron_engine") / "actor"))


@pytest.fixture(scope="module")
def model4(tmp_path_factory):
    """Four layers: two model chunks of one layer on each of two pipeline stages."""
    from verl.demo.tiny_model import make_tiny_model_dir

    return make_tiny_model_dir(str(tmp_path_factory.mktemp("megatron_engine") / "actor4"), num_layers=4)


@pytest.fixture(scope="module")
def moe_model(tmp_path_factory):
    """Qwen3-MoE, two layers of 4 experts (top 2, norm_topk_prob, q/k norms)."""
    from verl.demo.tiny_model import make_tiny_model_dir

    root = tmp_path_factory.mktemp("megatron_engine")
    return make_tiny_model_dir(str(root / "moe"), family="qwen3-moe", num_layers=2)


_KEYS = ("old_log_probs", "entropys", "ref_log_prob", "dynamic_log_probs")


def _assert_equals_fsdp(ref: dict, got: dict, label: str) -> None:
    """``got`` (a Megatron run) against ``ref`` (FSDP2), to the tolerances of the module's docstring."""
    mask = rollout_batch(vocab=200, seed=3).batch["attention_mask"][:, PROMPT_LEN:].bool()
    keys = _KEYS
    diffs = {key: (got[key] - ref[key])[mask].abs().max().item() for key in keys}
    assert set(got["before"]) == set(ref["before"]) and all(
        torch.equal(got["before"][k], ref["before"][k]) for k in ref["before"]
    )
    # the update moved the weights, clipped (grad_clip=0.5 below the norm) the same way in both
    moved = max((ref["after"][k] - ref["before"][k]).abs().max().item() for k in ref["after"])
    assert moved > 1e-3 and ref["grad_norm"][0] > 0.5
    largest = max(g.abs().max().item() for g in ref["grads"].values())
    assert got["grads"].keys() == ref["grads"].keys()
    diffs["grads"] = max((got["grads"][k] - g).abs().max().item() for k, g in ref["grads"].items()) / largest
    diffs["params"] = max((got["after"][k] - ref["after"][k]).abs().max().item() for k in ref["after"]) / moved
    # the whole model's distance from FSDP's after the update, relative to its norm; and each tensor's, relative to
    # its norm, over the entries whose gradient is above float noise (1e-4 of the largest; elsewhere AdamW's first
    # step g / (|g| + eps) turns the engines' 1e-9 differences into any fraction of lr: the key biases, whose true
    # gradient is zero as softmax ignores a per-query constant, are such tensors throughout)
    sq = lambda d: sum(t.double().pow(2).sum().item() for t in d.values())  # noqa: E731
    delta = {k: got["after"][k] - t for k, t in ref["after"].items()}
    diffs["params_rel"] = (sq(delta) / sq(ref["after"])) ** 0.5
    signal = {k: ref["grads"][k].abs() > 1e-4 * largest for k in ref["after"]}
    rel = {k: (d * signal[k]).norm().item() / (ref["after"][k] * signal[k]).norm().item() for k, d in delta.items()}
    diffs["params_rel_signal"] = max(r for k, r in rel.items() if signal[k].any())
    diffs["grad_norm"] = abs(got["grad_norm"][0] - ref["grad_norm"][0]) / ref["grad_norm"][0]
    diffs["pg_loss"] = abs(got["pg_loss"][0] - ref["pg_loss"][0])
    print(f"{label} megatron vs fsdp2:", diffs)
    for key in (*keys, "pg_loss"):
        assert diffs[key] < 1e-4, (key, diffs[key])
    assert diffs["grads"] < 1e-5 and diffs["grad_norm"] < 1e-5 and diffs["params"] < 0.05, diffs
    assert diffs["params_rel"] < 2e-5 and diffs["params_rel_signal"] < 1e-5, diffs
    rollout = got["rollout"]
    assert all(torch.equal(rollout[k], got["after"][k]) for k in got["after"])


@pytest.mark.parametrize(
    "tp, pp, vpp, which",
    [
        (2, 1, None, "qwen2"),
        (1, 2, None, "qwen2"),
        (1, 2, 2, "qwen2-4layers"),
        (1, 2, None, "qwen3-moe"),
        (1, 1, None, "qwen3-moe-ep2"),
        (2, 1, None, "qwen3-moe"),
    ],
    ids=["tp2", "pp2", "pp2-vpp2", "pp2-qwen3-moe", "ep2-qwen3-moe", "tp2-qwen3-moe"],
)
def test_megatron_worker_equals_fsdp(model, model4, moe_model, tmp_path, tp, pp, vpp, which):
    """(pp2-vpp2: virtual pipeline stages, layers 0 and 2 on stage 0 and 1 and 3 on stage 1, a micro batch going
    round the pipeline twice. pp2-qwen3-moe: a mixture of experts, megatron-core's router and experts against
    transformers' under FSDP2, expert parallel 1. tp2-qwen3-moe: the experts split over tensor parallel 2, with
    sequence parallelism, which megatron-core's MoE layer needs there.)"""
    model = {"qwen2": model, "qwen2-4layers": model4, "qwen3-moe": moe_model, "qwen3-moe-ep2": moe_model}[which]
    ep = 2 if which.endswith("ep2") else 1
    out, ckpt = str(tmp_path / "result.pt"), str(tmp_path / "global_step_1" / "actor")
    # at TP=2 also without sequence parallelism, except for a mixture of experts (megatron-core's MoE layer needs it)
    no_sp = tp > 1 and "moe" not in which
    spawn_gloo_ranks(_run, WORLD, model, tp, pp, vpp, ep, out, ckpt, no_sp)
    results = torch.load(out)
    ref, got = results["fsdp"], results["megatron"]
    _assert_equals_fsdp(ref, got, f"tp={tp} pp={pp} vpp={vpp} ep={ep} sp={tp > 1}")
    if no_sp:
        plain = results["megatron_no_sp"]
        assert got["sequence_parallel"] and not plain["sequence_parallel"]
        _assert_equals_fsdp(ref, plain, f"tp={tp} pp={pp} sp=False")
        mask = rollout_batch(vocab=200, seed=3).batch["attention_mask"][:, PROMPT_LEN:].bool()
        sp_diffs = {key: (got[key] - plain[key])[mask].abs().max().item() for key in _KEYS}
        largest = max(g.abs().max().item() for g in plain["grads"].values())
        sp_diffs["grads"] = max((got["grads"][k] - g).abs().max().item() for k, g in plain["grads"].items()) / largest
        sp_diffs["params"] = max(
            ((got["after"][k] - p).abs().max() / p.abs().max()).item() for k, p in plain["after"].items()
        )
        print("sequence parallel vs not:", sp_diffs)
        assert all(value < 1e-5 for value in sp_diffs.values()), sp_diffs
    # checkpoint: restored exactly, and the update after the resume equals the uninterrupted one
    assert got["second_moved"] > 1e-4 and got["restored_exact"] and got["resumed_exact"], got
    # the checkpoint's huggingface/ folder is an HF model of the saved weights
    from transformers import AutoModelForCausalLM

    hf = AutoModelForCausalLM.from_pretrained(str(tmp_path / "global_step_1" / "actor" / "huggingface"))
    hf_state = _checkpoint_names(hf, hf.state_dict())
    assert set(got["after"]) <= set(hf_state) and all(torch.equal(hf_state[n], t) for n, t in got["after"].items())
    # the model merger rebuilds the same HF model from dist_ckpt/ alone (no process group)
    from verl.model_merger import main as merge

    target = tmp_path / "merged"
    merge(["merge", "--backend", "megatron", "--local_dir", ckpt, "--target_dir", str(target), "--dtype", "float32"])
    merged_model = AutoModelForCausalLM.from_pretrained(str(target))
    merged = _checkpoint_names(merged_model, merged_model.state_dict())
    assert set(got["after"]) <= set(merged) and all(torch.equal(merged[n], t) for n, t in got["after"].items())


def _tp_pp_sequence_parallel(rank: int, model: str, out: str) -> None:
    """Four ranks at TP=2 x PP=2: the actor's log-probs and one update without and with sequence parallelism (the
    stages then exchange each rank's share of the positions)."""
    from verl.workers.roles.actor_rollout_ref import ActorRolloutRefWorker

    torch.set_num_threads(1)
    results = {}
    for sequence_parallel in (False, True):
        config = _config(model, "megatron", 2, 2, sequence_parallel=sequence_parallel)
        worker = ActorRolloutRefWorker(config, role="actor")
        worker.init_model()
        full = rollout_batch(vocab=worker.hf_config.vocab_size, seed=3)
        parts = [None] * 4
        dist.all_gather_object(parts, worker.compute_log_prob(full.chunk(4)[rank]).batch["old_log_probs"])
        full.batch["old_log_probs"] = full.batch["ref_log_prob"] = torch.cat(parts)
        before = _full_params(worker)
        worker.update_actor(full.chunk(4)[rank])
        results[sequence_parallel] = {
            "log_probs": torch.cat(parts),
            "before": before,
            "after": _full_params(worker),
            "flag": worker.actor_engine.module.config.sequence_parallel,
        }
    if rank == 0:
        torch.save(results, out)


@pytest.mark.slow
def test_sequence_parallel_with_pipeline_stages_equals_without(model, tmp_path):
    out = str(tmp_path / "result.pt")
    spawn_gloo_ranks(_tp_pp_sequence_parallel, 4, model, out)
    plain, split = (torch.load(out)[flag] for flag in (False, True))
    assert split["flag"] and not plain["flag"]
    mask = rollout_batch(vocab=200, seed=3).batch["attention_mask"][:, PROMPT_LEN:].bool()
    assert (split["log_probs"] - plain["log_probs"])[mask].abs().max() < 1e-5
    moved = max((plain["after"][k] - plain["before"][k]).abs().max().item() for k in plain["after"])
    diff = max((split["after"][k] - p).abs().max().item() for k, p in plain["after"].items())
    assert moved > 1e-3 and diff / moved < 1e-5, (diff, moved)
