"""The Megatron engine's checkpoints in megatron-core's distributed layout, resumed at other parallel sizes, on 2
gloo processes.

An actor at tensor parallel 2 with sequence parallelism takes one PPO update, saves (``dist_ckpt/``: model and AdamW
moments), and takes a second update: the uninterrupted run. Then, in the same processes:

- an actor at pipeline parallel 2 loads that checkpoint: its parameters equal the saved ones exactly (every tensor is
  stored whole and resharded on load), and its second update equals the uninterrupted one to 1e-4 of the step's
  size (measured 2.6e-5: the other layout sums the gradients in another order, and AdamW divides by the root of
  the second moment, which magnifies float noise where it is small; without the optimizer state the step would
  differ by about its own size);
- an actor at data parallel 2 with the distributed optimizer (each rank one slice of AdamW's state) does the same;
- an actor at pipeline parallel 2 with ``use_dist_checkpointing=True`` and ``dist_checkpointing_path`` at the
  checkpoint's ``dist_ckpt/`` starts from the saved weights instead of ``model.path``.

``python -m verl.model_merger merge --backend megatron`` reads ``dist_ckpt/`` in this process alone (no process group)
into an HF folder whose transformers logits equal the saved model's.

Across the layouts of virtual pipeline and expert parallelism (the stored tensors carry global layer and expert
indices): a four-layer model saved at pipeline parallel 2 with two model chunks per stage resumes at tensor parallel 2
with sequence parallelism, and a Qwen3-MoE saved at expert parallel 2 (each rank two of four experts) resumes at
pipeline parallel 2, expert parallel 1: loaded exactly, second update as uninterrupted to 1e-4 of its size.
"""

from __future__ import annotations

import pytest
import torch

pytest.importorskip("megatron.core", reason="megatron-core is not installed (pip install -e .[megatron])")

from tests.gloo_ranks import spawn_gloo_ranks  # noqa: E402
from tests.workers.gpu_actor_steps import PROMPT_LEN, RESPONSE_LEN, rollout_batch  # noqa: E402

WORLD = 2


def _worker(
    model: str,
    tp: int,
    pp: int,
    sequence_parallel: bool,
    distributed_optimizer: bool,
    init: str | None,
    vpp: int | None = None,
    ep: int = 1,
):
    from tests.trainer.ppo_e2e_utils import compose_config
    from verl.workers.roles.actor_rollout_ref import ActorRolloutRefWorker

    actor = "actor_rollout_ref.actor"
    overrides = [
        f"actor_rollout_ref.model.path={model}",
        f"{actor}.strategy=megatron",
        f"{actor}.optim.lr=1e-2",
        f"{actor}.optim.total_training_steps=10",
        f"{actor}.ppo_mini_batch_size=8",
        f"{actor}.ppo_micro_batch_size_per_gpu=4",
        f"{actor}.grad_clip=0.5",
        f"{actor}.checkpoint.save_contents=[model,optimizer,extra]",
        f"{actor}.megatron.tensor_model_parallel_size={tp}",
        f"{actor}.megatron.pipeline_model_parallel_size={pp}",
        f"{actor}.megatron.sequence_parallel={sequence_parallel}",
        f"{actor}.megatron.use_distributed_optimizer={distributed_optimizer}",
        f"{actor}.megatron.virtual_pipeline_model_parallel_size={vpp or 'null'}",
        f"{actor}.megatron.expert_model_parallel_size={ep}",
        "actor_rollout_ref.rollout.name=hf",
        "actor_rollout_ref.rollout.n=1",
        f"actor_rollout_ref.rollout.response_length={RESPONSE_LEN}",
        "actor_rollout_ref.rollout.log_prob_micro_batch_size_per_gpu=4",
        f"data.max_response_length={RESPONSE_LEN}",
    ]
    if init is not None:
        overrides.append(f"{actor}.megatron.use_dist_checkpointing=True")
        overrides.append(f"{actor}.megatron.dist_checkpointing_path={init}")
    worker = ActorRolloutRefWorker(compose_config(overrides, "ppo_megatron_trainer").actor_rollout_ref, role="actor")
    worker.init_model()
    return worker


def _params(worker) -> dict[str, torch.Tensor]:
    return {name: t.clone() for name, t in worker.actor_engine.hf_weights()}


def _batch(rank: int):
    full = rollout_batch(vocab=200, seed=3)
    g = torch.Generator().manual_seed(4)
    full.batch["old_log_probs"] = -torch.rand(full.batch["responses"].shape, generator=g)
    return full.chunk(WORLD)[rank]


def _run(rank: int, model: str, ckpt: str, out: str) -> None:
    torch.set_num_threads(1)
    original = _worker(model, 2, 1, True, False, None)
    original.update_actor(_batch(rank))
    original.save_checkpoint(ckpt, global_step=1)
    result = {"saved": _params(original)}
    log_probs = original.compute_log_prob(_batch(rank)).batch["old_log_probs"]
    parts = [None] * WORLD
    torch.distributed.all_gather_object(parts, log_probs)
    result["log_probs"] = torch.cat(parts)
    original.update_actor(_batch(rank))
    result["uninterrupted"] = _params(original)
    for name, (tp, pp, distributed_optimizer) in {"pp2": (1, 2, False), "dp2": (1, 1, True)}.items():
        worker = _worker(model, tp, pp, False, distributed_optimizer, None)
        worker.load_checkpoint(ckpt)
        result[f"{name}_loaded"] = _params(worker)
        worker.update_actor(_batch(rank))
        result[f"{name}_resumed"] = _params(worker)
    result["init"] = _params(_worker(model, 1, 2, False, False, f"{ckpt}/dist_ckpt"))
    if rank == 0:
        torch.save(result, out)


def test_dist_checkpoint_resumes_at_other_sizes_and_merges(tmp_path):
    from verl.demo.tiny_model import make_tiny_model_dir

    model = make_tiny_model_dir(str(tmp_path / "model"))
    ckpt, out = str(tmp_path / "global_step_1" / "actor"), str(tmp_path / "result.pt")
    spawn_gloo_ranks(_run, WORLD, model, ckpt, out)
    result = torch.load(out)
    saved, uninterrupted = result["saved"], result["uninterrupted"]
    second_step = max((uninterrupted[k] - saved[k]).abs().max().item() for k in saved)
    assert second_step > 1e-3
    for name in ("pp2", "dp2"):
        loaded, resumed = result[f"{name}_loaded"], result[f"{name}_resumed"]
        assert loaded.keys() == saved.keys() and all(torch.equal(loaded[k], saved[k]) for k in saved), name
        diff = max((resumed[k] - uninterrupted[k]).abs().max().item() for k in saved) / second_step
        print(f"{name}: second update after the resume vs uninterrupted, relative to the step: {diff:.2e}")
        assert diff < 1e-4, (name, diff)
    assert all(torch.equal(result["init"][k], saved[k]) for k in saved)  # use_dist_checkpointing started from it

    # the merger: dist_ckpt/ alone into an HF folder whose logits are the saved model's
    from transformers import AutoModelForCausalLM

    from verl.model_merger import main as merge
    from verl.utils.torch_functional import logprobs_from_logits

    target = tmp_path / "merged"
    merge(["merge", "--backend", "megatron", "--local_dir", ckpt, "--target_dir", str(target), "--dtype", "float32"])
    merged = AutoModelForCausalLM.from_pretrained(str(target), dtype=torch.float32, attn_implementation="eager")
    assert all(torch.equal(merged.state_dict()[k], t) for k, t in saved.items())
    batch = rollout_batch(vocab=200, seed=3).batch
    with torch.no_grad():
        logits = merged(
            input_ids=batch["input_ids"], attention_mask=batch["attention_mask"], position_ids=batch["position_ids"]
        ).logits
    log_probs = logprobs_from_logits(logits[:, PROMPT_LEN - 1 : -1], batch["responses"])
    mask = batch["attention_mask"][:, PROMPT_LEN:].bool()
    assert (log_probs - result["log_probs"])[mask].abs().max() < 1e-4


def _run_layouts(rank: int, dense: str, moe: str, root: str, out: str) -> None:
    torch.set_num_threads(1)
    result = {}
    cases = {
        # name: (model, saving layout, resuming layout), a layout (tp, pp, sequence_parallel, vpp, ep)
        "vpp_to_tp_sp": (dense, (1, 2, False, 2, 1), (2, 1, True, None, 1)),
        "ep_to_pp": (moe, (1, 1, False, None, 2), (1, 2, False, None, 1)),
    }
    for name, (model, (tp, pp, sp, vpp, ep), (tp2, pp2, sp2, vpp2, ep2)) in cases.items():
        ckpt = f"{root}/{name}/global_step_1/actor"
        original = _worker(model, tp, pp, sp, False, None, vpp, ep)
        original.update_actor(_batch(rank))
        original.save_checkpoint(ckpt, global_step=1)
        result[f"{name}_saved"] = _params(original)
        original.update_actor(_batch(rank))
        result[f"{name}_uninterrupted"] = _params(original)
        del original
        worker = _worker(model, tp2, pp2, sp2, False, None, vpp2, ep2)
        worker.load_checkpoint(ckpt)
        result[f"{name}_loaded"] = _params(worker)
        worker.update_actor(_batch(rank))
        result[f"{name}_resumed"] = _params(worker)
        del worker
    if rank == 0:
        torch.save(result, out)


def test_dist_checkpoint_moves_between_virtual_pipeline_and_expert_layouts(tmp_path):
    from verl.demo.tiny_model import make_tiny_model_dir

    dense = make_tiny_model_dir(str(tmp_path / "dense4"), num_layers=4)
    moe = make_tiny_model_dir(str(tmp_path / "moe"), family="qwen3-moe", num_layers=2)
    out = str(tmp_path / "result.pt")
    spawn_gloo_ranks(_run_layouts, WORLD, dense, moe, str(tmp_path), out)
    result = torch.load(out)
    for name in ("vpp_to_tp_sp", "ep_to_pp"):
        saved, uninterrupted = result[f"{name}_saved"], result[f"{name}_uninterrupted"]
        loaded, resumed = result[f"{name}_loaded"], result[f"{name}_resumed"]
        assert loaded.keys() == saved.keys() and all(torch.equal(loaded[k], saved[k]) for k in saved), name
        second_step = max((uninterrupted[k] - saved[k]).abs().max().item() for k in saved)
        assert second_step > 1e-3, name
        diff = max((resumed[k] - uninterrupted[k]).abs().max().item() for k in saved) / second_step
        print(f"{name}: second update after the resume vs uninterrupted, relative to the step: {diff:.2e}")
        assert diff < 1e-4, (name, diff)
