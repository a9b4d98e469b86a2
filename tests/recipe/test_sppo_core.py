"""SPPO's advantage step and loss against hand-computed values, the trainer's advantage phase, and its config check
(before Ray starts)."""

import math
import os

import pytest
import torch

from recipe.sppo.sppo_core import (
    SPPO_LOSS_MODE,
    compute_sppo_loss,
    compute_sppo_policy_loss,
    seq_level_rewards,
    softmean,
    sppo_advantages,
)
from tests.trainer.ppo_e2e_utils import with_rollout_name
from verl import DataProto
from verl.trainer.config import ConfigError
from verl.trainer.ppo.losses import POLICY_LOSS_REGISTRY, get_policy_loss_fn

CONFIG_DIR = os.path.join(
    os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))), "recipe", "sppo", "config"
)

# scores s = [0, 1, 2] as token rewards on 2 response tokens
TOKEN_REWARDS = torch.tensor([[0.0, 0.0], [0.0, 1.0], [1.0, 1.0]])


def _hand_softmean(xs, beta):
    return math.log(sum(math.exp(beta * x) for x in xs) / len(xs)) / beta


@pytest.mark.parametrize("beta", [1.0, 2.0, 0.5])
def test_seq_level_rewards_subtract_the_soft_mean_over_the_batch(beta):
    expected = [s - _hand_softmean([0, 1, 2], beta) for s in (0, 1, 2)]
    torch.testing.assert_close(seq_level_rewards(TOKEN_REWARDS, beta), torch.tensor(expected))
    # beta=1: log((1 + e + e^2) / 3) = 1.308994...
    assert softmean(torch.tensor([0.0, 1.0, 2.0]), 1.0).item() == pytest.approx(1.308994, abs=1e-6)


def test_seq_level_rewards_beta_zero_is_the_arithmetic_mean():
    torch.testing.assert_close(seq_level_rewards(TOKEN_REWARDS, 0.0), torch.tensor([-1.0, 0.0, 1.0]))
    # a tiny beta tends to the same values (continuity at 0), and large scores do not overflow
    torch.testing.assert_close(
        seq_level_rewards(TOKEN_REWARDS, 1e-6), torch.tensor([-1.0, 0.0, 1.0]), atol=1e-5, rtol=0
    )
    assert softmean(torch.tensor([1000.0, 0.0]), 1.0).item() == pytest.approx(1000 - math.log(2))


# Three sequences, T=3; the middle one has no response token.
LOG_PROB = torch.tensor([[-1.0, -2.0, -5.0], [-0.5, -0.5, -0.5], [-1.0, -1.0, -1.0]])
OLD_LOG_PROB = torch.tensor([[-1.5, -2.5, 0.0], [-1.0, -1.0, -1.0], [-2.0, -1.0, -1.0]])
MASK = torch.tensor([[1, 1, 0], [0, 0, 0], [1, 0, 1]])
REWARDS = torch.tensor([0.25, 3.0, -0.25])
# eta = 2: seq 0: (0.5 + 0.5) - 2*0.25 = 0.5 -> 0.25; seq 2: (1.0 + 0.0) - 2*(-0.25) = 1.5 -> 2.25; seq 1 skipped
EXPECTED_LOSS = (0.25 + 2.25) / 2


def test_sppo_loss_hand_computed_and_skips_sequences_without_response_tokens():
    log_prob = LOG_PROB.clone().requires_grad_(True)
    loss, log_ratio = compute_sppo_loss(OLD_LOG_PROB, log_prob, REWARDS, MASK, eta=2.0)
    assert loss.item() == pytest.approx(EXPECTED_LOSS)
    torch.testing.assert_close(log_ratio.detach(), torch.tensor([1.0, 0.0, 1.0]))
    loss.backward()
    # d/dlogp of mean_i (L_i - eta r_i)^2 = 2 (L_i - eta r_i) / n_valid on each response token
    expected_grad = torch.tensor([[0.5, 0.5, 0.0], [0.0, 0.0, 0.0], [1.5, 0.0, 1.5]])
    torch.testing.assert_close(log_prob.grad, expected_grad)


def test_sppo_loss_all_masked_is_zero_not_nan():
    loss, _ = compute_sppo_loss(OLD_LOG_PROB, LOG_PROB, REWARDS, torch.zeros_like(MASK), eta=1.0)
    assert loss.item() == 0.0


def test_sppo_loss_refuses_other_aggregation_modes():
    with pytest.raises(ValueError, match="seq-mean-token-sum"):
        compute_sppo_loss(OLD_LOG_PROB, LOG_PROB, REWARDS, MASK, loss_agg_mode="seq-mean-token-sum")


def test_registered_loss_reads_the_reward_from_advantages_and_eta_from_the_actor_config():
    from verl.trainer.config import ActorConfig

    assert get_policy_loss_fn(SPPO_LOSS_MODE) is compute_sppo_policy_loss
    advantages = sppo_advantages(REWARDS, MASK)  # what the trainer writes: the reward on each response token
    torch.testing.assert_close(advantages[2], torch.tensor([-0.25, 0.0, -0.25]))
    config = ActorConfig.from_config({"sppo_eta": 2.0})
    loss, clipfrac, ppo_kl, clipfrac_lower = compute_sppo_policy_loss(
        OLD_LOG_PROB, LOG_PROB, advantages, MASK, "token-mean", config
    )
    assert loss.item() == pytest.approx(EXPECTED_LOSS)
    assert clipfrac.item() == 0.0 and clipfrac_lower.item() == 0.0
    assert ppo_kl.item() == pytest.approx(-2.0 / 4)  # mean of old - new over the 4 response tokens: -(0.5+0.5+1+0)/4
    # the reward is read at each row's first response token, so a mask that starts later works too
    late = torch.tensor([[0, 1, 1], [0, 0, 0], [0, 0, 1]])
    loss_late, *_ = compute_sppo_policy_loss(
        OLD_LOG_PROB, LOG_PROB, sppo_advantages(REWARDS, late), late, "token-mean", config
    )
    # seq 0: (0.5 + (-5 - 0)) - 0.5 = -5 -> 25; seq 2: 0 - (-0.5) = 0.5 -> 0.25
    assert loss_late.item() == pytest.approx((25 + 0.25) / 2)


def test_trainer_advantage_phase_writes_seq_level_rewards():
    from recipe.sppo.sppo_ray_trainer import RaySPPOTrainer
    from verl.trainer.config import PPOConfig
    from verl.trainer.ppo.reward import PendingReward

    trainer = object.__new__(RaySPPOTrainer)  # only the advantage phase: no workers, no data
    trainer.ppo_config = PPOConfig.from_config(_compose(["algorithm.sppo_eta=0"]))
    mask = torch.tensor([[1, 1], [1, 0], [1, 1]])
    batch = DataProto.from_dict(tensors={"response_mask": mask, "responses": torch.zeros(3, 2, dtype=torch.long)})
    out = trainer._compute_advantage(batch, PendingReward((TOKEN_REWARDS, {})), metrics={})
    torch.testing.assert_close(out.batch["seq_level_rewards"], torch.tensor([-1.0, 0.0, 1.0]))
    torch.testing.assert_close(out.batch["advantages"], torch.tensor([[-1.0, -1.0], [0.0, 0.0], [1.0, 1.0]]))
    assert torch.equal(out.batch["returns"], out.batch["advantages"])


# ------------------------------------------------------------------------------------------------ config
def _compose(overrides):
    from hydra import compose, initialize_config_dir

    from verl.demo.assets import resolve_builtin_paths

    with initialize_config_dir(config_dir=CONFIG_DIR, version_base=None):
        config = compose(config_name="sppo_trainer", overrides=with_rollout_name(overrides))
    resolve_builtin_paths(config)
    return config


def test_default_config_passes_and_uses_the_sppo_keys():
    from recipe.sppo.config_check import check_sppo_config
    from verl.demo.assets import resolve_builtin_paths
    from verl.demo.default_run import apply_builtin_demo

    config = _compose([])
    assert config.algorithm.adv_estimator is None and config.actor_rollout_ref.actor.policy_loss.loss_mode == "sppo"
    assert config.actor_rollout_ref.actor.sppo_eta == 1.0 and config.algorithm.sppo_eta == 1.0
    apply_builtin_demo(config, set())  # the built-in model and data: files exist
    assert config.algorithm.adv_estimator is None  # the recipe's own value, not the demo's grpo
    check_sppo_config(resolve_builtin_paths(config))


def test_main_ppo_still_refuses_a_null_estimator():
    from verl.trainer.config.checks.ppo import check_ppo_config

    with pytest.raises(ConfigError, match="algorithm.adv_estimator=None is not supported"):
        check_ppo_config(_compose([]), check_paths=False)


@pytest.mark.parametrize(
    ("overrides", "expected"),
    [
        (["actor_rollout_ref.actor.sppo_eta=abc"], ["actor_rollout_ref.actor.sppo_eta='abc'", "finite number"]),
        (["actor_rollout_ref.actor.sppo_eta=0"], ["actor_rollout_ref.actor.sppo_eta=0", "> 0"]),
        (["algorithm.sppo_eta=[1]"], ["algorithm.sppo_eta=[1]", "finite number"]),
        (["algorithm.sppo_eta=-1"], ["algorithm.sppo_eta=-1", ">= 0"]),
        (["algorithm.adv_estimator=grpo"], ["algorithm.adv_estimator='grpo'", "expected null"]),
        (["actor_rollout_ref.actor.loss_agg_mode=seq-mean-token-sum"], ["loss_agg_mode='seq-mean-token-sum'"]),
        (["actor_rollout_ref.actor.policy_loss.loss_mode=vanilla"], ["loss_mode='vanilla'", "expected 'sppo'"]),
        (["actor_rollout_ref.actor.policy_loss.loss_mode=nope"], ["loss_mode='nope'", "'sppo'", "'vanilla'"]),
        (["data.train_batch_size=x"], ["data.train_batch_size='x'", "expected int"]),
        (["~actor_rollout_ref.actor.sppo_eta"], ["actor_rollout_ref.actor.sppo_eta: missing"]),
    ],
)
def test_bad_config_is_refused_naming_the_key(overrides, expected):
    from recipe.sppo.config_check import check_sppo_config

    with pytest.raises(ConfigError) as info:
        check_sppo_config(_compose(overrides))
    for fragment in expected:
        assert fragment in str(info.value), str(info.value)


def test_run_sppo_refuses_bad_config_before_ray_starts(monkeypatch):
    import ray

    from recipe.sppo.main_sppo import run_sppo

    def no_ray(*args, **kwargs):
        raise AssertionError("Ray was started before the config was checked")

    # whatever another test left running, this run must not reach Ray
    monkeypatch.setattr(ray, "is_initialized", lambda: False)
    monkeypatch.setattr(ray, "init", no_ray)
    with pytest.raises(ConfigError, match="algorithm.sppo_eta='x'"):
        run_sppo(_compose(["algorithm.sppo_eta=x"]))
    assert SPPO_LOSS_MODE in POLICY_LOSS_REGISTRY


@pytest.mark.parametrize("script", ["run_sppo_cpu.sh", "run_qwen2.5-0.5b_gsm8k.sh"])
def test_run_scripts_use_known_keys(script):
    from recipe.sppo.config_check import check_sppo_config
    from tests.recipe.script_overrides import script_overrides

    overrides = script_overrides(os.path.join(os.path.dirname(CONFIG_DIR), script), {"HOME": "/home/u"})
    assert len(overrides) > 25, overrides
    config = _compose(overrides)  # Hydra refuses a key that is not in the config
    assert config.actor_rollout_ref.actor.sppo_eta == 1.0 and config.algorithm.sppo_eta == 1.0
    if script == "run_sppo_cpu.sh":
        check_sppo_config(config)  # runnable here as written: builtin model and data, HF rollout, CPU
