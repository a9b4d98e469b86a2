"""GRPO with images end to end: the tiny Qwen2.5-VL example script (verl's Qwen2.5-VL command line scaled down) on
two Ray CPU workers with the HF rollout, then ``model_merger`` exports the checkpoint as a Hugging Face VLM folder
that transformers loads, with the trained weights and the processor files."""

from __future__ import annotations

import os
import subprocess

import pytest
import torch

from tests.trainer.ppo_e2e_utils import parse_console_metrics, write_reward_fn

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
SCRIPT = os.path.join(ROOT, "examples", "grpo_trainer", "run_qwen2_5_vl_tiny_cpu_geo3k.sh")


@pytest.mark.slow
def test_geo3k_grpo_script_trains_and_the_checkpoint_merges_to_a_loadable_vlm(tmp_path):
    from transformers import AutoModelForImageTextToText

    from verl.model_merger.__main__ import main as merger_main
    from verl.utils.tokenizer import hf_processor

    env = dict(os.environ, VERL_TINY_GEO3K_DIR=str(tmp_path), VERL_LOGGING_LEVEL="WARNING", RAY_DEDUP_LOGS="0")
    overrides = [
        # a dense toy reward, so that GRPO advantages (and so gradients) are nonzero on a random model
        f"custom_reward_function.path={write_reward_fn(tmp_path)}",
        "trainer.console_format=full",
        "trainer.resume_mode=disable",
        "trainer.save_freq=2",
        "trainer.val_before_train=True",
        "trainer.test_freq=2",
    ]
    result = subprocess.run(
        ["bash", SCRIPT, *overrides], cwd=str(tmp_path), env=env, capture_output=True, text=True, timeout=600
    )
    assert result.returncode == 0, result.stderr[-4000:]
    steps = [s for s in parse_console_metrics(result.stdout) if "training/global_step" in s]
    assert [int(s["step"]) for s in steps] == [1, 2], result.stdout[-3000:]
    assert any(s["actor/grad_norm"] > 0 for s in steps)
    assert all(s["prompt_length/mean"] > 100 for s in steps)  # text + the image's pad tokens
    assert any(k.startswith("val-core/hiyouga/geometry3k/") for k in steps[-1])

    actor_dir = tmp_path / "checkpoints" / "global_step_2" / "actor"
    target = tmp_path / "merged"
    merger_main(["merge", "--backend", "fsdp", "--local_dir", str(actor_dir), "--target_dir", str(target)])
    merged = AutoModelForImageTextToText.from_pretrained(str(target), dtype=torch.float32)
    initial = AutoModelForImageTextToText.from_pretrained(str(tmp_path / "model"), dtype=torch.float32)
    merged_sd, initial_sd = merged.state_dict(), initial.state_dict()
    assert merged_sd.keys() == initial_sd.keys()
    changed = [k for k in merged_sd if not torch.allclose(merged_sd[k], initial_sd[k].to(torch.bfloat16).float())]
    assert any(".visual." in f".{k}" for k in changed), "the vision tower was trained and exported"
    assert any("language_model" in k for k in changed)
    processor = hf_processor(str(target))
    assert processor is not None and processor.image_processor.merge_size == 2
