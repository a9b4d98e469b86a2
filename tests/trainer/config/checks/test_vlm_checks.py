"""The config check for a vision-language policy: what the runtime cannot do with one is refused before Ray starts,
naming the key, the value and the fix; data.bad_multimodal_rows is a checked choice."""

from __future__ import annotations

import importlib.util

import pytest

from tests.trainer.ppo_e2e_utils import base_overrides, compose_config
from verl.demo.tiny_vlm import write_tiny_geometry3k
from verl.trainer.config import ConfigError
from verl.trainer.config.checks.ppo import check_ppo_config
from verl.trainer.config.checks.vlm import vllm_vlm_unsupported_reason


@pytest.fixture(scope="module")
def workspace(tiny_vlm_dir, tmp_path_factory):
    import subprocess
    import sys

    root = tmp_path_factory.mktemp("vlm_config")
    raw = write_tiny_geometry3k(str(root / "raw"), num_train=2, num_test=1)
    script = "examples/data_preprocess/geo3k.py"
    subprocess.run([sys.executable, script, "--local_dataset_path", raw, "--local_dir", str(root)], check=True)
    return {
        "model": tiny_vlm_dir,
        "critic": tiny_vlm_dir,
        "train": str(root / "train.parquet"),
        "val": str(root / "test.parquet"),
        "root": str(root),
    }


def _check(workspace, *extra, estimator="grpo"):
    overrides = base_overrides(workspace, estimator) + ["data.max_prompt_length=192", *extra]
    check_ppo_config(compose_config(overrides), check_device=False)


def test_hf_rollout_with_a_vlm_is_accepted(workspace):
    _check(workspace)


@pytest.mark.skipif(importlib.util.find_spec("torchvision") is not None, reason="torchvision is installed here")
def test_vllm_rollout_with_a_vlm_is_refused_naming_key_value_and_fix(workspace):
    with pytest.raises(ConfigError) as info:
        _check(workspace, "actor_rollout_ref.rollout.name=vllm")
    message = str(info.value)
    assert "actor_rollout_ref.rollout.name='vllm'" in message
    assert "vision-language model (qwen2_5_vl)" in message and "torchvision" in message
    assert "set actor_rollout_ref.rollout.name=hf" in message
    assert vllm_vlm_unsupported_reason() is not None


def test_agent_loops_with_a_vlm_are_refused(workspace):
    with pytest.raises(ConfigError, match="agent-loop"):
        _check(workspace, "actor_rollout_ref.rollout.mode=async")


def test_sequence_parallelism_with_a_qwen_vl_is_accepted(workspace):
    sp = ["actor_rollout_ref.actor.ulysses_sequence_parallel_size=2", "actor_rollout_ref.model.use_remove_padding=True"]
    _check(workspace, *sp)


def test_vlm_critic_is_refused(workspace):
    with pytest.raises(ConfigError, match="critic: the model at actor_rollout_ref.model.path is a vision-language"):
        _check(workspace, estimator="gae")


def test_bad_multimodal_rows_is_a_checked_choice(workspace):
    _check(workspace, "data.bad_multimodal_rows=skip")
    with pytest.raises(ConfigError, match="data.bad_multimodal_rows"):
        _check(workspace, "data.bad_multimodal_rows=drop")
