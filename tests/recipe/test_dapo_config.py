"""DAPO's config: its YAML on top of ppo_trainer, bad recipe keys refused before Ray starts, the overlong buffer
wired from the config into the reward manager (values by hand)."""

import subprocess
import sys
import time

import numpy as np
import pytest
import torch

from recipe.dapo.main_dapo import check_dapo_config
from recipe.entropy.main_entropy import check_entropy_config
from tests.recipe.dapo_utils import compose_recipe_config
from verl import DataProto
from verl.demo.tiny_model import shipped_tokenizer_path
from verl.trainer.config import ConfigError, PPOConfig
from verl.trainer.config.checks.ppo import check_ppo_config
from verl.trainer.ppo.reward import compute_reward_async, load_reward_manager
from verl.utils.tokenizer import hf_tokenizer


def dapo(overrides=()):
    return compose_recipe_config("dapo", "dapo_trainer", overrides)


def test_dapo_yaml_sets_verls_dapo_defaults():
    cfg = PPOConfig.from_config(dapo(["data.train_batch_size=8"]))
    actor = cfg.actor_rollout_ref.actor
    assert (actor.clip_ratio_low, actor.clip_ratio_high, actor.clip_ratio_c) == (0.2, 0.28, 10.0)
    assert actor.loss_agg_mode == "token-mean" and not actor.use_kl_loss and not cfg.algorithm.use_kl_in_reward
    assert cfg.data.gen_batch_size == 8 and cfg.reward_model.reward_manager == "dapo"
    filter_groups = {"enable": False, "metric": None, "max_num_gen_batches": 0, "max_inflight_gen_batches": 1}
    assert cfg.algorithm.filter_groups.to_dict() == filter_groups
    assert cfg.reward_model.overlong_buffer.to_dict() == {
        "enable": False,
        "len": 0,
        "penalty_factor": 0.0,
        "log": False,
    }
    check_dapo_config(dapo())


def test_entropy_yaml_repeats_the_dapo_keys():
    entropy = compose_recipe_config("entropy", "entropy_trainer")
    base = dapo()
    for section in ("data", "reward_model", "algorithm"):
        assert entropy[section] == base[section], section
    for key in ("clip_ratio_low", "clip_ratio_high", "clip_ratio_c", "loss_agg_mode", "use_kl_loss"):
        assert entropy.actor_rollout_ref.actor[key] == base.actor_rollout_ref.actor[key], key
    assert entropy.actor_rollout_ref.actor.policy_loss.loss_mode == "clip_cov"
    check_entropy_config(entropy)
    with pytest.raises(ConfigError, match=r"policy_loss\.loss_mode='gspo'.*\['clip_cov', 'kl_cov', 'vanilla'\]"):
        check_entropy_config(
            compose_recipe_config("entropy", "entropy_trainer", ["actor_rollout_ref.actor.policy_loss.loss_mode=gspo"])
        )
    bad_ratio = [
        "actor_rollout_ref.actor.policy_loss.loss_mode=kl_cov",
        "actor_rollout_ref.actor.policy_loss.kl_cov_ratio=0",
    ]
    with pytest.raises(ConfigError, match=r"policy_loss\.kl_cov_ratio=0\.0 must be in \(0, 1\]"):
        check_entropy_config(compose_recipe_config("entropy", "entropy_trainer", bad_ratio))


@pytest.mark.parametrize(
    ("overrides", "message"),
    [
        (["algorithm.filter_groups.enable=yes"], r"algorithm\.filter_groups\.enable='yes'"),
        (["algorithm.filter_groups.max_num_gen_batches=ten"], r"algorithm\.filter_groups\.max_num_gen_batches='ten'"),
        (["data.gen_batch_size=many"], r"data\.gen_batch_size='many'"),
        (["data.train_batch_size=8", "data.gen_batch_size=4"], r"data\.gen_batch_size=4 must be >= data\.train_batch"),
        (["algorithm.filter_groups.enable=True"], r"algorithm\.filter_groups\.metric=None"),
    ],
)
def test_bad_recipe_keys_are_refused(overrides, message):
    with pytest.raises(ConfigError, match=message):
        check_dapo_config(dapo(overrides))


@pytest.mark.parametrize(
    ("overrides", "message"),
    [
        (
            ["reward_model.overlong_buffer.enable=True", "reward_model.overlong_buffer.len=512"],
            r"reward_model\.overlong_buffer\.len=512 must be > 0 and\s+< data\.max_response_length=512",
        ),
        (
            [
                "reward_model.overlong_buffer.enable=True",
                "reward_model.overlong_buffer.len=2",
                "reward_model.reward_manager=naive",
            ],
            r"reward_model\.reward_manager='naive' does not",
        ),
    ],
)
def test_a_bad_overlong_buffer_is_refused_by_the_ppo_check(overrides, message):
    """overlong_buffer is a main_ppo key (the dapo reward manager applies it), so the PPO check refuses it."""
    with pytest.raises(ConfigError, match=message):
        check_ppo_config(dapo(overrides), check_paths=False, check_device=False)


def test_cli_refuses_a_bad_key_before_ray_starts(tmp_path):
    start = time.perf_counter()
    result = subprocess.run(
        [sys.executable, "-m", "recipe.dapo.main_dapo", "data.train_batch_size=8", "data.gen_batch_size=4"],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert result.returncode != 0
    assert "data.gen_batch_size=4 must be >= data.train_batch_size=8" in result.stderr
    assert "Started a local Ray instance" not in result.stdout + result.stderr
    assert time.perf_counter() - start < 60


def response_batch(tokenizer, responses: list[str], ground_truths: list[str], response_len: int = 12) -> DataProto:
    """One-token prompts and the given responses (+ eos), right-padded to ``response_len``; one byte is one token."""
    bs = len(responses)
    prompts = torch.full((bs, 1), tokenizer.encode("1", add_special_tokens=False)[0])
    response_ids = torch.full((bs, response_len), tokenizer.pad_token_id)
    mask = torch.zeros(bs, 1 + response_len, dtype=torch.long)
    mask[:, 0] = 1
    for i, text in enumerate(responses):
        ids = tokenizer.encode(text, add_special_tokens=False) + [tokenizer.eos_token_id]
        response_ids[i, : len(ids)] = torch.tensor(ids)
        mask[i, 1 : 1 + len(ids)] = 1
    return DataProto.from_dict(
        tensors={"prompts": prompts, "responses": response_ids, "attention_mask": mask},
        non_tensors={
            "data_source": np.array(["verl/arithmetic"] * bs, dtype=object),
            "reward_model": np.array([{"style": "rule", "ground_truth": g} for g in ground_truths], dtype=object),
        },
    )


def test_overlong_buffer_from_the_config_by_hand():
    config = dapo(
        [
            "data.max_response_length=12",
            "reward_model.overlong_buffer.enable=True",
            "reward_model.overlong_buffer.len=4",
            "reward_model.overlong_buffer.penalty_factor=0.5",
            "reward_model.overlong_buffer.log=True",
        ]
    )
    check_dapo_config(config)
    tokenizer = hf_tokenizer(shipped_tokenizer_path())
    manager = load_reward_manager(config, tokenizer, num_examine=0)
    # response tokens (with eos): 3, 11, 8, 9; expected length 12 - 4 = 8; penalty = min(-(len - 8) / 4 * 0.5, 0)
    data = response_batch(tokenizer, ["82", "1234567890", "1234567", "82345678"], ["82", "7", "7", "82345678"])
    result = manager(data, return_dict=True)
    rewards = result["reward_tensor"]
    assert rewards[0, 2] == 1.0  # right, short: no penalty
    assert rewards[1, 10] == pytest.approx(0.0 - 3 / 4 * 0.5)  # wrong, 3 tokens into the buffer
    assert rewards[2, 7] == 0.0  # exactly the expected length: no penalty
    assert rewards[3, 8] == pytest.approx(1.0 - 1 / 4 * 0.5)  # right, 1 token into the buffer
    assert rewards.sum().item() == pytest.approx(1.0 - 0.375 + 1.0 - 0.125)
    assert result["reward_extra_info"]["overlong"] == [False, True, False, True]
    assert result["reward_extra_info"]["overlong_reward"] == pytest.approx([0.0, -0.375, 0.0, -0.125])
    # the manager that launch_reward_fn_async builds inside its Ray task comes from the same config
    reward_tensor, _ = compute_reward_async(data, PPOConfig.from_config(config), tokenizer)
    assert torch.equal(reward_tensor, rewards)
