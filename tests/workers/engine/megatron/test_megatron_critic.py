"""The Megatron critic and reward model (``critic.strategy=megatron``, ``reward_model.strategy=megatron``) equal the
FSDP2 ones, on 2 gloo processes.

Each run builds the real ``CriticWorker`` and ``RewardModelWorker`` twice in the same two processes: from
``ppo_trainer`` with ``strategy=fsdp2`` (data parallel 2) and from ``ppo_megatron_trainer`` at tensor parallel 2 or
pipeline parallel 2 (data parallel 1). Every rank gets its DP_COMPUTE_PROTO chunk of one batch and the per-rank
results are concatenated in rank order, as the worker group does.

The critic is loaded from a token-classification folder (its ``score`` head with bias), the reward model from a
sequence-classification folder (``score`` without bias: zero, as transformers initialises it for the FSDP RM).
Values and scores must agree to 1e-4; after one critic update (value clipping, gradient clipping active) on the same
batch with the same optimizer, the values must again agree to 1e-4 and the change of the values to 1e-3 of its size.
A Megatron critic saved after the update and restored resumes exactly; its checkpoint's ``huggingface/`` folder and
the model merger's output load as HF token-classification models with its weights. A critic from a causal-LM folder (no
``score``) starts from a head drawn as transformers draws a missing one (normal(0, initializer_range), zero bias),
the same on every tensor-parallel rank.
"""

from __future__ import annotations

import pytest
import torch
import torch.distributed as dist

pytest.importorskip("megatron.core", reason="megatron-core is not installed (pip install -e .[megatron])")

from tests.gloo_ranks import spawn_gloo_ranks  # noqa: E402
from tests.workers.gpu_actor_steps import RESPONSE_LEN, rollout_batch  # noqa: E402

WORLD = 2
# the critic's optimizer and batch sizes in the Megatron critic tests (one mini batch of 8, micro batches of 4)
CRITIC_BATCHES_AND_OPTIM = [
    "critic.optim.lr=1e-2",
    "critic.optim.total_training_steps=10",
    "critic.ppo_mini_batch_size=8",
    "critic.ppo_micro_batch_size_per_gpu=4",
    "critic.forward_micro_batch_size_per_gpu=4",
]


def _config(models: dict, strategy: str, tp: int, pp: int, critic_path: str | None = None, vpp: int | None = None):
    from tests.trainer.ppo_e2e_utils import compose_config

    overrides = [
        f"actor_rollout_ref.model.path={models['actor']}",
        "actor_rollout_ref.rollout.n=1",
        f"critic.model.path={critic_path or models['critic']}",
        f"critic.strategy={strategy}",
        *CRITIC_BATCHES_AND_OPTIM,
        "critic.grad_clip=0.5",
        "critic.cliprange_value=0.05",
        "reward_model.enable=True",
        f"reward_model.model.path={models['rm']}",
        f"reward_model.strategy={strategy}",
        "reward_model.micro_batch_size_per_gpu=4",
        f"data.max_response_length={RESPONSE_LEN}",
    ]
    if strategy == "megatron":
        for role in ("critic", "reward_model"):
            overrides += [
                f"{role}.megatron.tensor_model_parallel_size={tp}",
                f"{role}.megatron.pipeline_model_parallel_size={pp}",
                f"{role}.megatron.virtual_pipeline_model_parallel_size={vpp or 'null'}",
                f"{role}.megatron.sequence_parallel={tp > 1}",  # the YAML default, where it applies
                f"{role}.megatron.use_distributed_optimizer=False",
            ]
        overrides.append("critic.checkpoint.save_contents=[model,optimizer,extra,hf_model]")
    config_name = "ppo_megatron_trainer" if strategy == "megatron" else "ppo_trainer"
    return compose_config(overrides, config_name)


def _collect(part: torch.Tensor) -> torch.Tensor:
    parts = [None] * WORLD
    dist.all_gather_object(parts, part)
    return torch.cat(parts)


def _critic_batch():
    full = rollout_batch(vocab=200, seed=5)
    g = torch.Generator().manual_seed(7)
    full.batch["returns"] = torch.randn(full.batch["responses"].shape, generator=g)
    return full


def _megatron_params(worker) -> dict[str, torch.Tensor]:
    return {name: t.clone() for name, t in worker.engine.hf_weights()}


def _steps(rank: int, models: dict, strategy: str, tp: int, pp: int, ckpt: str | None, vpp=None) -> dict:
    from verl.workers.roles.critic import CriticWorker
    from verl.workers.roles.reward_model import RewardModelWorker

    config = _config(models, strategy, tp, pp, vpp=vpp)
    critic = CriticWorker(config.critic)
    critic.init_model()
    full = _critic_batch()
    shard = full.chunk(WORLD)[rank]
    result = {"values": _collect(critic.compute_values(shard).batch["values"])}
    full.batch["values"] = result["values"]
    metrics = critic.update_critic(full.chunk(WORLD)[rank]).meta_info["metrics"]
    result["grad_norm"] = metrics["critic/grad_norm"][0]
    result["vf_loss"] = metrics["critic/vf_loss"][0]
    result["values_after"] = _collect(critic.compute_values(shard).batch["values"])
    rm = RewardModelWorker(config.reward_model)
    rm.init_model()
    result["rm_scores"] = _collect(rm.compute_rm_score(shard).batch["rm_scores"])
    if strategy == "megatron":
        from tests.workers.engine.megatron.test_megatron_engine import exact_resume

        result["after"] = _megatron_params(critic)
        update = lambda: critic.update_critic(full.chunk(WORLD)[rank])  # noqa: E731
        result.update(exact_resume(critic, update, lambda: _megatron_params(critic), result["after"], ckpt))
        if tp > 1:  # a causal-LM folder: the head as transformers draws a missing one, the same on every tp rank
            fresh = CriticWorker(_config(models, strategy, tp, pp, critic_path=models["actor"]).critic)
            fresh.init_model()
            head = fresh.engine.module.output_layer
            result["fresh_head"] = [_collect(head.weight.detach()[None]), _collect(head.bias.detach()[None])]
    return result


def _run(rank: int, models: dict, tp: int, pp: int, vpp: int | None, out: str, ckpt: str):
    torch.set_num_threads(1)
    baseline = _steps(rank, models, "fsdp2", 1, 1, None)
    megatron = _steps(rank, models, "megatron", tp, pp, ckpt, vpp)
    if rank == 0:
        torch.save({"fsdp": baseline, "megatron": megatron}, out)


@pytest.fixture(scope="module")
def models4(tmp_path_factory) -> dict[str, str]:
    """Four-layer critic and reward model (two model chunks of one layer on each of two pipeline stages)."""
    from verl.demo.tiny_model import make_tiny_model_dir

    root = tmp_path_factory.mktemp("megatron_roles4")
    return {
        "actor": make_tiny_model_dir(str(root / "actor"), num_layers=4),
        "critic": make_tiny_model_dir(str(root / "critic"), head="token_classification", seed=1, num_layers=4),
        "rm": make_tiny_model_dir(str(root / "rm"), head="sequence_classification", seed=2, num_layers=4),
    }


@pytest.mark.parametrize("tp, pp, vpp", [(2, 1, None), (1, 2, None), (1, 2, 2)], ids=["tp2", "pp2", "pp2-vpp2"])
def test_megatron_critic_and_rm_equal_fsdp(models, models4, tmp_path, tp, pp, vpp):
    """(pp2-vpp2: the scalar heads on the last stage's last model chunk.)"""
    if vpp is not None:
        models = models4
    out, ckpt = str(tmp_path / "result.pt"), str(tmp_path / "global_step_1" / "critic")
    spawn_gloo_ranks(_run, WORLD, models, tp, pp, vpp, out, ckpt)
    results = torch.load(out)
    ref, got = results["fsdp"], results["megatron"]
    mask = _critic_batch().batch["response_mask"].bool()
    moved = (ref["values_after"] - ref["values"])[mask]
    diffs = {
        "values": (got["values"] - ref["values"])[mask].abs().max().item(),
        "values_after": (got["values_after"] - ref["values_after"])[mask].abs().max().item(),
        "update": ((got["values_after"] - got["values"])[mask] - moved).abs().max().item() / moved.abs().max().item(),
        "grad_norm": abs(got["grad_norm"] - ref["grad_norm"]) / ref["grad_norm"],
        "vf_loss": abs(got["vf_loss"] - ref["vf_loss"]),
        "rm_scores": (got["rm_scores"] - ref["rm_scores"]).abs().max().item(),
    }
    print(f"tp={tp} pp={pp} vpp={vpp} megatron vs fsdp2:", diffs, "largest value change", moved.abs().max().item())
    # the update moved the values, with the gradient clipped (grad_clip=0.5 below the norm)
    assert moved.abs().max().item() > 1e-2 and ref["grad_norm"] > 0.5
    assert ref["rm_scores"].abs().max() > 1e-3  # scores that are not all zero
    for key in ("values", "values_after", "vf_loss", "rm_scores"):
        assert diffs[key] < 1e-4, (key, diffs)
    assert diffs["update"] < 1e-3 and diffs["grad_norm"] < 1e-5, diffs
    # checkpoint: restored exactly, and the update after the resume equals the uninterrupted one
    assert {"score.weight", "score.bias"} <= set(got["after"])
    assert got["second_moved"] > 1e-4 and got["restored_exact"] and got["resumed_exact"], got
    # the checkpoint's huggingface/ folder, and the model merger's from dist_ckpt/, are HF token-
    # classification models of the saved critic
    from transformers import AutoModelForTokenClassification

    from verl.model_merger import main as merge

    target = tmp_path / "merged"
    merge(["merge", "--backend", "megatron", "--local_dir", ckpt, "--target_dir", str(target), "--dtype", "float32"])
    for folder in (tmp_path / "global_step_1" / "critic" / "huggingface", target):
        hf = AutoModelForTokenClassification.from_pretrained(str(folder)).state_dict()
        assert set(got["after"]) <= set(hf) and all(torch.equal(hf[n], t) for n, t in got["after"].items()), folder
    if tp > 1:
        weights, biases = got["fresh_head"]
        assert torch.equal(weights[0], weights[1]) and biases.abs().max() == 0
        assert 0.01 < weights[0].std().item() < 0.03  # initializer_range 0.02, 64 draws
