"""PRIME's formulas against hand-computed values: advantage, PRM losses, implicit rewards, accuracy filtering; and
the refusal of bad PRIME keys."""

import math
import os
import subprocess
import sys

import numpy as np
import pytest
import torch

from recipe.prime.prime_config import PrimeDataSettings, check_prime_config
from recipe.prime.prime_core_algos import compute_ce_loss_rm, compute_dpo_loss_rm, compute_prime_advantage_return
from recipe.prime.prime_dp_rm import implicit_rewards
from recipe.prime.prime_ray_trainer import group_broadcast, select_prompts
from tests.recipe.prime.prime_test_utils import CONFIG_DIR, compose_prime_config
from verl.trainer.config import ConfigError

UID = np.array(["a", "a", "b", "b"], dtype=object)
MASK = torch.tensor([[1, 1, 0], [1, 1, 1], [1, 0, 0], [1, 1, 0]], dtype=torch.float32)
RM_SCORES = torch.tensor([[0.2, 0.4, 9.0], [0.1, 0.1, 0.4], [0.5, 7.0, 7.0], [0.1, 0.3, 5.0]])  # 9/7/5: padding
ACC = torch.tensor([1.0, 0.0, 1.0, 1.0])


def test_prime_advantage_hand_computed():
    # group a: values 0.3, 0.2 (S=0.5); group b: 0.5, 0.2 (S=0.7); token r -> (2r - S) / 1
    # dense (x2): r0 [-0.1, 0.3], r1 [-0.3, -0.3, 0.3], r2 [0.3], r3 [-0.5, -0.1]
    # outcome (x3) at the last token: a: 1 - 0 = 1, 0 - 1 = -1; b: 1 - 1 = 0 for both
    expected_returns = torch.tensor([[3.4, 3.6, 0.0], [-3.6, -3.0, -2.4], [0.6, 0.0, 0.0], [-1.2, -0.2, 0.0]])
    adv, ret = compute_prime_advantage_return(RM_SCORES, ACC, MASK, UID, reward_dpo_coef=2.0, reward_gt_coef=3.0)
    torch.testing.assert_close(ret, expected_returns, atol=1e-5, rtol=0)
    values = torch.tensor([3.4, 3.6, -3.6, -3.0, -2.4, 0.6, -1.2, -0.2])
    mean, var = values.mean(), values.var(unbiased=True)
    expected_adv = torch.zeros(4, 3)
    expected_adv[MASK.bool()] = (values - mean) / torch.sqrt(var + 1e-8)
    torch.testing.assert_close(adv, expected_adv, atol=1e-4, rtol=0)


def test_prime_advantage_sources_can_be_switched_off():
    _, only_gt = compute_prime_advantage_return(RM_SCORES, ACC, MASK, UID, reward_dpo_coef=0.0, reward_gt_coef=1.0)
    torch.testing.assert_close(only_gt[:, 0], torch.tensor([1.0, -1.0, 0.0, 0.0]))
    _, only_rm = compute_prime_advantage_return(RM_SCORES, None, MASK, UID, reward_dpo_coef=1.0, reward_gt_coef=1.0)
    torch.testing.assert_close(only_rm[2], torch.tensor([0.3, 0.0, 0.0]))
    with pytest.raises(ValueError, match="at least 2 responses"):
        compute_prime_advantage_return(RM_SCORES, ACC, MASK, np.array(list("abcd"), dtype=object), 1.0, 1.0)


def test_ce_and_dpo_losses_hand_computed():
    mask = torch.ones(2, 2)
    q = torch.tensor([[1.0, 1.0], [0.0, 0.0]])
    # CE: logits 0.5 * 2 = 1 (acc 1) and 0 (acc 0): mean of log(1 + e^-1) and log 2
    ce = compute_ce_loss_rm(q, torch.tensor([1.0, 0.0]), mask, beta=0.5)
    assert ce.item() == pytest.approx((math.log(1 + math.exp(-1)) + math.log(2)) / 2, abs=1e-6)
    # DPO: the correct one (Q=1) against the wrong one (Q=0) and vice versa: both -log sigmoid(1)
    q_group = torch.tensor([[2.0, 0.0], [2.0, 0.0]])
    acc_group = torch.tensor([[1.0, 0.0], [1.0, 0.0]])
    dpo = compute_dpo_loss_rm(q, torch.tensor([1.0, 0.0]), q_group, acc_group, mask, beta=0.5)
    assert dpo.item() == pytest.approx(math.log(1 + math.exp(-1)), abs=1e-6)
    # a group with one outcome only has no pairs: no loss
    same = compute_dpo_loss_rm(q, torch.ones(2), q_group, torch.ones(2, 2), mask, beta=0.5)
    assert same.item() == 0.0


def test_implicit_rewards_granularity_and_norm():
    q = torch.tensor([[1.0, -3.0, 5.0], [2.0, 2.0, 0.0]])
    mask = torch.tensor([[1, 1, 0], [1, 1, 1]])
    token = implicit_rewards(q, mask, beta=0.5, granularity="token", norm="none")
    torch.testing.assert_close(token, torch.tensor([[0.5, -1.5, 0.0], [1.0, 1.0, 0.0]]))
    whole = implicit_rewards(q, mask, beta=0.5, granularity="whole", norm="none")
    torch.testing.assert_close(whole, torch.tensor([[0.0, -1.0, 0.0], [0.0, 0.0, 2.0]]))
    # largest |return-to-go| of the token rewards: row 1's 2.0
    normed = implicit_rewards(q, mask, beta=0.5, granularity="token", norm="batch_norm")
    torch.testing.assert_close(normed, token / (2.0 + 1e-6))


def _data_settings(filter_truncate=True):
    return PrimeDataSettings(
        filter_accuracy=True,
        accuracy_lower_bound=0.2,
        accuracy_upper_bound=0.8,
        oversample_factor=2.0,
        filter_truncate=filter_truncate,
        train_batch_size=2,
        max_response_length=8,
    )


def test_accuracy_filter_and_downsampling():
    # 4 prompts x 2 responses: p0 all right, p1 half, p2 all wrong, p3 half but one response hit the length limit
    uid = np.repeat(np.array(["p0", "p1", "p2", "p3"], dtype=object), 2)
    acc = torch.tensor([1.0, 1.0, 1.0, 0.0, 0.0, 0.0, 0.0, 1.0])
    length = torch.tensor([3, 4, 5, 2, 6, 7, 8, 3])
    rows, passed = select_prompts(acc, length, uid, _data_settings())
    assert passed.tolist() == [False, True, False, False]
    assert rows.tolist() == [2, 3, 0, 1]  # the passing prompt first, then the first of the others
    rows, passed = select_prompts(acc, length, uid, _data_settings(filter_truncate=False))
    assert passed.tolist() == [False, True, False, True]
    assert rows.tolist() == [2, 3, 6, 7]


def test_group_broadcast_follows_uids_not_positions():
    uid = np.array(["x", "y", "x", "y"], dtype=object)
    out = group_broadcast(torch.tensor([1.0, 2.0, 3.0, 4.0]), uid)
    torch.testing.assert_close(out, torch.tensor([[1.0, 3.0], [2.0, 4.0], [1.0, 3.0], [2.0, 4.0]]))


@pytest.mark.parametrize(
    ("override", "message"),
    [
        ("data.oversample_factor=abc", "data.oversample_factor='abc' must be a number"),
        ("data.oversample_factor=0.5", "data.oversample_factor=0.5 must be >= 1.0"),
        ("data.accuracy_upper_bound=1.5", "data.accuracy_upper_bound=1.5 must be >= 0.0 and <= 1.0"),
        ("data.filter_accuracy=maybe", "data.filter_accuracy='maybe' must be a boolean"),
        ("reward_model.model.update=sometimes", "reward_model.model.update='sometimes' is not supported"),
        ("reward_model.model.loss_type=mse", "expected one of ['ce', 'dpo']"),
        ("reward_model.model.beta_train=0", "reward_model.model.beta_train=0 must be > 0.0"),
        ("reward_model.prime_granularity=step", "reward_model.prime_granularity='step'"),
        ("algorithm.reward_gt_coef=high", "algorithm.reward_gt_coef='high' must be a number"),
        ("actor_rollout_ref.rollout.n=1", "actor_rollout_ref.rollout.n=1 must be >= 2"),
        ("reward_model.enable=False", "reward_model.enable=False"),
        ("algorithm.use_kl_in_reward=True", "with actor_rollout_ref.actor.use_kl_loss=True instead"),
    ],
)
def test_bad_prime_keys_are_refused_naming_the_key(override, message):
    with pytest.raises(ConfigError) as err:
        check_prime_config(compose_prime_config([override]))
    assert message in str(err.value)


def test_main_prime_refuses_a_bad_key_before_ray_starts(tmp_path):
    env = dict(os.environ, RAY_ADDRESS="")
    result = subprocess.run(
        [sys.executable, "-m", "recipe.prime.main_prime", *_script_overrides("run_prime_cpu.sh")]
        + ["data.accuracy_lower_bound=0.9"],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert result.returncode != 0
    assert "data.accuracy_lower_bound=0.9 must be <= data.accuracy_upper_bound=0.8" in result.stderr
    assert "ray.init" not in result.stderr and "Started a local Ray instance" not in result.stderr


def _script_overrides(script: str) -> list[str]:
    """The ``key=value`` lines of a run script, shell variables filled in as a user's shell would."""
    variables = {
        "$model_path": "Qwen/Qwen2.5-0.5B-Instruct",
        '"$train_files"': "['a.parquet']",
        '"$test_files"': "['b.parquet']",
    }
    out = []
    with open(os.path.join(os.path.dirname(CONFIG_DIR), script)) as f:
        for line in f:
            text = line.strip().removesuffix("\\").strip().removesuffix('"$@"').strip()
            key, sep, value = text.partition("=")
            if not sep or "." not in key or " " in key:
                continue
            out.append(f"{key}={variables.get(value, value)}")
    return out


@pytest.mark.parametrize("script", ["run_prime_qwen2.5-0.5b.sh", "run_prime_cpu.sh"])
def test_run_scripts_compose_and_pass_the_checks(script):
    overrides = _script_overrides(script)
    assert len(overrides) > 15, overrides
    config = compose_prime_config(overrides)  # an unknown key fails to compose
    check_prime_config(config)
