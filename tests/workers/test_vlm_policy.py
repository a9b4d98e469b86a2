"""A tiny Qwen2.5-VL as the policy, in one process: the HF rollout samples from images (n per prompt), and the
actor's log-probs of those samples, padded and packed (remove-padding), equal the model's own forward, which computes
its 3-D positions itself (transformers' rope index and mask)."""

from __future__ import annotations

import itertools

import numpy as np
import pytest
import torch
from omegaconf import OmegaConf

from verl.demo.tiny_vlm import write_tiny_geometry3k
from verl.protocol import DataProto
from verl.utils.dataset.rl_dataset import RLHFDataset, collate_fn
from verl.workers.actor import DataParallelPPOActor
from verl.workers.rollout import HFRollout

N, RESPONSE_LENGTH = 2, 6


@pytest.fixture(scope="module")
def policy(tiny_vlm_dir, tmp_path_factory):
    import subprocess
    import sys

    from transformers import AutoModelForImageTextToText

    from verl.utils.tokenizer import hf_processor, hf_tokenizer

    raw = write_tiny_geometry3k(str(tmp_path_factory.mktemp("geo3k_raw")), num_train=3, num_test=1)
    out = tmp_path_factory.mktemp("geo3k")
    script = "examples/data_preprocess/geo3k.py"
    subprocess.run([sys.executable, script, "--local_dataset_path", raw, "--local_dir", str(out)], check=True)
    tokenizer, processor = hf_tokenizer(tiny_vlm_dir), hf_processor(tiny_vlm_dir)
    config = OmegaConf.create({"max_prompt_length": 192, "filter_overlong_prompts": False})
    dataset = RLHFDataset(str(out / "train.parquet"), tokenizer, config, processor=processor)
    batch = collate_fn([dataset[i] for i in range(len(dataset))])
    model = AutoModelForImageTextToText.from_pretrained(tiny_vlm_dir, attn_implementation="sdpa").eval()
    return model, tokenizer, DataProto.from_single_dict(batch)


def _rollout(model, tokenizer, prompts: DataProto) -> DataProto:
    config = OmegaConf.create(
        {
            "name": "hf",
            "temperature": 1.0,
            "top_k": -1,
            "top_p": 1.0,
            "response_length": RESPONSE_LENGTH,
            "do_sample": True,
            "n": N,
            "val_kwargs": {"top_k": -1, "top_p": 1.0, "temperature": 0, "n": 1, "do_sample": False},
        }
    )
    gen = prompts.select(
        batch_keys=["input_ids", "attention_mask", "position_ids"], non_tensor_batch_keys=["multi_modal_inputs"]
    )
    gen.meta_info = {"eos_token_id": tokenizer.convert_tokens_to_ids("<|im_end|>"), "pad_token_id": 256}
    torch.manual_seed(0)
    return HFRollout(model, config).generate_sequences(gen)


def _reference_log_probs(model, batch: DataProto) -> torch.Tensor:
    """Log-probs of the responses from the model's own forward (it derives the 3-D positions from the mask)."""
    from verl.utils.vlm_processor import mm_token_type_ids

    rows = []
    for i in range(len(batch)):
        mask = batch.batch["attention_mask"][i].bool()
        ids = batch.batch["input_ids"][i][mask].unsqueeze(0)
        mm = batch.non_tensor_batch["multi_modal_inputs"][i]
        types = mm_token_type_ids(ids, model.config.image_token_id, model.config.video_token_id)
        with torch.no_grad():
            logits = model(input_ids=ids, mm_token_type_ids=types, **mm).logits[0]
        response_len = int(batch.batch["attention_mask"][i, -RESPONSE_LENGTH:].sum())
        log_probs = torch.log_softmax(logits.float(), dim=-1)[-response_len - 1 : -1]
        targets = ids[0, -response_len:]
        row = torch.zeros(RESPONSE_LENGTH)
        row[:response_len] = log_probs.gather(-1, targets[:, None])[:, 0]
        rows.append(row)
    return torch.stack(rows)


def _actor(model, use_remove_padding: bool, use_fused_kernels: bool = False) -> DataParallelPPOActor:
    config = OmegaConf.create(
        {
            "strategy": "fsdp",
            "ppo_mini_batch_size": 6,
            "ppo_micro_batch_size_per_gpu": 3,
            "use_dynamic_bsz": False,
            "ppo_max_token_len_per_gpu": 1024,
            "grad_clip": 1.0,
            "clip_ratio": 0.2,
            "policy_loss": {"loss_mode": "vanilla"},
            "loss_agg_mode": "token-mean",
            "entropy_coeff": 0.0,
            "use_kl_loss": False,
            "ppo_epochs": 1,
            "shuffle": False,
            "ulysses_sequence_parallel_size": 1,
            "use_remove_padding": use_remove_padding,
            "use_fused_kernels": use_fused_kernels,
            "use_torch_compile": False,
        }
    )
    return DataParallelPPOActor(config, model, torch.optim.SGD(model.parameters(), lr=0.0))


def test_hf_rollout_samples_n_per_image_prompt_and_log_probs_match_the_model(policy):
    model, tokenizer, prompts = policy
    out = _rollout(model, tokenizer, prompts)
    b, prompt_len = len(prompts) * N, prompts.batch["input_ids"].shape[1]
    assert out.batch["responses"].shape == (b, RESPONSE_LENGTH)
    assert out.batch["position_ids"].shape == (b, 3, prompt_len + RESPONSE_LENGTH)
    # response positions continue on all three rope axes from the prompt's last one
    pos = out.batch["position_ids"]
    assert torch.equal(pos[:, :, prompt_len] - pos[:, :, prompt_len - 1], torch.ones(b, 3, dtype=pos.dtype))

    batch = out
    batch.non_tensor_batch["multi_modal_inputs"] = np.repeat(prompts.non_tensor_batch["multi_modal_inputs"], N)
    batch.meta_info.update(micro_batch_size=3, use_dynamic_bsz=False, temperature=1.0)
    expected = _reference_log_probs(model, batch)
    response_mask = batch.batch["attention_mask"][:, -RESPONSE_LENGTH:].bool()
    for use_remove_padding, fused in itertools.product((False, True), (False, True)):
        log_probs, _ = _actor(model, use_remove_padding, fused).compute_log_prob(batch)
        diff = (log_probs - expected)[response_mask].abs().max().item()
        assert diff < 1e-4, f"use_remove_padding={use_remove_padding}, use_fused_kernels={fused}: max |diff| {diff}"


def test_update_reaches_the_vision_tower(policy):
    model, tokenizer, prompts = policy
    batch = _rollout(model, tokenizer, prompts)
    batch.non_tensor_batch["multi_modal_inputs"] = np.repeat(prompts.non_tensor_batch["multi_modal_inputs"], N)
    batch.batch["advantages"] = torch.randn(len(batch), RESPONSE_LENGTH, generator=torch.Generator().manual_seed(0))
    batch.meta_info["temperature"] = 1.0
    model.zero_grad()
    actor = _actor(model, use_remove_padding=True)
    actor._optimizer_step = lambda: torch.tensor(0.0)  # keep the gradients for the check below
    actor.actor_optimizer.zero_grad = lambda *a, **k: None
    actor.update_policy(batch)
    vision_grads = [p.grad for name, p in model.named_parameters() if ".visual." in f".{name}" and p.grad is not None]
    assert vision_grads and any(g.abs().sum() > 0 for g in vision_grads)
