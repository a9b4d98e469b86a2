"""Ulysses sequence parallelism (sp=2, two gloo ranks) for a tiny Qwen2.5-VL: the actor's packed log-probs and the
gradients (vision tower included) equal those of a single process."""

from __future__ import annotations

import os

import numpy as np
import pytest
import torch
import torch.distributed as dist
from omegaconf import OmegaConf

from tests.gloo_ranks import spawn_gloo_ranks

SP, RESPONSE_LENGTH = 2, 5


def _batch(model_dir: str, data_dir: str):
    from verl.protocol import DataProto
    from verl.utils.dataset.rl_dataset import RLHFDataset, collate_fn
    from verl.utils.tokenizer import hf_processor, hf_tokenizer
    from verl.workers.rollout.hf_rollout import build_rollout_output

    tokenizer, processor = hf_tokenizer(model_dir), hf_processor(model_dir)
    config = OmegaConf.create({"max_prompt_length": 192, "filter_overlong_prompts": False})
    dataset = RLHFDataset(os.path.join(data_dir, "train.parquet"), tokenizer, config, processor=processor)
    rows = collate_fn([dataset[i] for i in range(len(dataset))])
    g = torch.Generator().manual_seed(0)
    responses = torch.randint(0, 256, (len(dataset), RESPONSE_LENGTH), generator=g)
    responses[0, 3:] = tokenizer.pad_token_id  # a shorter response: right padding inside the batch
    out = build_rollout_output(
        rows["input_ids"], rows["attention_mask"], rows["position_ids"], responses, eos_token_id=tokenizer.pad_token_id
    )
    batch = DataProto(batch=out, non_tensor_batch={"multi_modal_inputs": rows["multi_modal_inputs"]})
    return batch, torch.randn(len(dataset), RESPONSE_LENGTH, generator=g)


def _log_probs_and_grads(model_dir: str, data_dir: str, sp: int):
    from transformers import AutoModelForImageTextToText

    from verl.models.transformers.monkey_patch import apply_monkey_patch
    from verl.workers.actor import DataParallelPPOActor
    from verl.workers.engine.micro_batches import to_device

    model = AutoModelForImageTextToText.from_pretrained(model_dir, attn_implementation="sdpa", dtype=torch.float32)
    apply_monkey_patch(model, ulysses_sp_size=sp, use_remove_padding=True)
    config = OmegaConf.create(
        {
            "strategy": "fsdp",
            "ppo_mini_batch_size": 3,
            "ppo_micro_batch_size_per_gpu": 3,
            "ppo_max_token_len_per_gpu": 4096,
            "grad_clip": 1.0,
            "ulysses_sequence_parallel_size": sp,
            "use_remove_padding": True,
        }
    )
    actor = DataParallelPPOActor(config, model)
    batch, weights = _batch(model_dir, data_dir)
    micro = to_device(
        {**batch.batch.to_dict(), "multi_modal_inputs": batch.non_tensor_batch["multi_modal_inputs"]}, "cpu"
    )
    _, log_probs = actor._forward_micro_batch(micro, temperature=1.0)
    mask = batch.batch["attention_mask"][:, -RESPONSE_LENGTH:]
    (log_probs * weights * mask).sum().backward()
    grads = {name: p.grad.clone() for name, p in model.named_parameters() if p.grad is not None}
    return (log_probs * mask).detach(), grads


def _worker(rank: int, model_dir: str, data_dir: str, out_dir: str):
    from verl.utils.ulysses import set_ulysses_sequence_parallel_group

    torch.set_num_threads(1)
    set_ulysses_sequence_parallel_group(dist.group.WORLD)
    try:
        log_probs, grads = _log_probs_and_grads(model_dir, data_dir, SP)
    finally:
        set_ulysses_sequence_parallel_group(None)
    for grad in grads.values():
        dist.all_reduce(grad)  # data-parallel averaging over the sp ranks, before / sp
        grad /= SP
    if rank == 0:
        torch.save({"log_probs": log_probs, "grads": grads}, os.path.join(out_dir, "sp.pt"))


@pytest.mark.slow
def test_sp2_vlm_log_probs_and_grads_match_single_process(tiny_vlm_dir, tmp_path):
    import subprocess
    import sys

    from verl.demo.tiny_vlm import write_tiny_geometry3k

    raw = write_tiny_geometry3k(str(tmp_path / "raw"), num_train=3, num_test=1)
    data = tmp_path / "data"
    script = "examples/data_preprocess/geo3k.py"
    subprocess.run([sys.executable, script, "--local_dataset_path", raw, "--local_dir", str(data)], check=True)
    spawn_gloo_ranks(_worker, SP, tiny_vlm_dir, str(data), str(tmp_path))
    got = torch.load(tmp_path / "sp.pt")
    ref_log_probs, ref_grads = _log_probs_and_grads(tiny_vlm_dir, str(data), 1)
    torch.testing.assert_close(got["log_probs"], ref_log_probs, rtol=1e-4, atol=1e-4)
    assert set(got["grads"]) == set(ref_grads)
    assert any(".visual." in f".{name}" for name in ref_grads)
    for name, grad in ref_grads.items():
        torch.testing.assert_close(got["grads"][name], grad, rtol=1e-3, atol=1e-5, msg=name)
    assert np.isfinite(ref_log_probs.numpy()).all()
