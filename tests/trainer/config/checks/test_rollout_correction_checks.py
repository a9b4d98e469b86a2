"""`algorithm.rollout_correction` settings the runtime cannot honour are refused before Ray, naming key and fix."""

import os

import pytest
from hydra import compose, initialize_config_dir

import verl
from verl.trainer.config import ConfigError, PPOConfig
from verl.trainer.config.checks.ppo import check_ppo_config
from verl.trainer.config.checks.rollout_correction import check_rollout_correction
from verl.trainer.ppo.losses import POLICY_LOSS_REGISTRY, register_policy_loss

CONFIG_DIR = os.path.join(os.path.dirname(verl.__file__), "trainer", "config")
RC = "algorithm.rollout_correction"
LOG_PROBS = "actor_rollout_ref.rollout.calculate_log_probs=True"
NO_LOG_PROBS = "actor_rollout_ref.rollout.calculate_log_probs=False"  # the default here (verl 0.9: True)


def config(*overrides):
    with initialize_config_dir(config_dir=CONFIG_DIR, version_base=None):
        return PPOConfig.from_config(compose(config_name="ppo_trainer", overrides=list(overrides)))


def test_defaults_are_off_and_pass():
    cfg = config()
    corr = cfg.algorithm.rollout_correction
    assert (corr.rollout_is, corr.rollout_is_threshold, corr.rollout_rs, corr.rollout_rs_threshold) == (
        None,
        2.0,
        None,
        None,
    )
    assert (corr.bypass_mode, corr.loss_type, corr.rollout_is_batch_normalize) == (False, "ppo_clip", False)
    check_rollout_correction(cfg)


@pytest.mark.parametrize(
    "overrides",
    [
        [f"{RC}.rollout_is=token", LOG_PROBS, "actor_rollout_ref.rollout.name=hf"],
        [f"{RC}.rollout_is=sequence", f"{RC}.rollout_is_threshold='0.5_5.0'", LOG_PROBS],
        [f"{RC}.rollout_rs='token_k1,seq_max_k3'", f"{RC}.rollout_rs_threshold='0.5_2.0,0.01'", LOG_PROBS],
        [f"{RC}.rollout_rs=geometric", f"{RC}.rollout_rs_threshold=1.001", LOG_PROBS],
        [f"{RC}.bypass_mode=True", f"{RC}.loss_type=reinforce", f"{RC}.rollout_is=sequence", LOG_PROBS],
        # verl 0.7.0's keys, which its YAML had (so its scripts set them without '+')
        [
            f"{RC}.rollout_rs=geometric",
            f"{RC}.rollout_rs_threshold=1.001",
            f"{RC}.rollout_rs_threshold_lower=0.999",
            f"{RC}.rollout_token_veto_threshold=1e-4",
            LOG_PROBS,
        ],
        [f"{RC}.rollout_token_veto_threshold=1e-4", LOG_PROBS],
    ],
)
def test_valid_settings_pass(overrides):
    check_rollout_correction(config(*overrides))


@pytest.mark.parametrize(
    "overrides, expected",
    [
        (
            [f"{RC}.rollout_is=token", NO_LOG_PROBS],
            ["calculate_log_probs=False", "set actor_rollout_ref.rollout.calculate_log_probs"],
        ),
        ([f"{RC}.bypass_mode=True", NO_LOG_PROBS], ["bypass_mode=True", "calculate_log_probs=True"]),
        ([f"{RC}.rollout_is=tokens", LOG_PROBS], [f"{RC}.rollout_is='tokens'", "'token' or 'sequence'"]),
        ([f"{RC}.rollout_is=token", f"{RC}.rollout_is_threshold=0", LOG_PROBS], ["rollout_is_threshold=0", "> 0"]),
        ([f"{RC}.rollout_is=token", f"{RC}.rollout_is_threshold='5_0.5'", LOG_PROBS], ["0 <= lower < upper"]),
        ([f"{RC}.rollout_rs=token_k1", LOG_PROBS], [f"{RC}.rollout_rs='token_k1' needs {RC}.rollout_rs_threshold"]),
        ([f"{RC}.rollout_rs=seq_k1", f"{RC}.rollout_rs_threshold=2", LOG_PROBS], ["unknown option 'seq_k1'"]),
        ([f"{RC}.rollout_rs=token_k1", f"{RC}.rollout_rs_threshold=0.9", LOG_PROBS], ["must be > 1"]),
        ([f"{RC}.loss_type=reinforce", LOG_PROBS], [f"{RC}.loss_type='reinforce'", "bypass_mode=True"]),
        ([f"{RC}.loss_type=ppo", LOG_PROBS], [f"{RC}.loss_type='ppo'", "ppo_clip"]),
        ([f"{RC}.rollout_is_batch_normalize=True", LOG_PROBS], ["rollout_is_batch_normalize=True", "rollout_is=null"]),
        (
            [f"{RC}.rollout_rs=token_k3", f"{RC}.rollout_rs_threshold=0.01", f"{RC}.rollout_rs_threshold_lower=0.5"],
            [f"{RC}.rollout_rs_threshold_lower=0.5", "no k1 option"],
        ),
        (
            [f"{RC}.rollout_rs=token", f"{RC}.rollout_rs_threshold=2.0", f"{RC}.rollout_rs_threshold_lower=3.0"],
            [f"{RC}.rollout_rs_threshold_lower=3.0", "lower < upper"],
        ),
        ([f"{RC}.rollout_token_veto_threshold=0", LOG_PROBS], [f"{RC}.rollout_token_veto_threshold=0", "> 0"]),
        (
            [f"{RC}.rollout_token_veto_threshold=1e-4", NO_LOG_PROBS],
            ["rollout_token_veto_threshold=0.0001", "calculate_log_probs"],
        ),
        (
            [
                f"{RC}.bypass_mode=True",
                f"{RC}.loss_type=reinforce",
                "actor_rollout_ref.actor.policy_loss.loss_mode=gspo",
                LOG_PROBS,
            ],
            ["loss_mode='gspo'", "loss_type=ppo_clip"],
        ),
    ],
)
def test_refused_with_key_value_and_fix(overrides, expected):
    with pytest.raises(ConfigError) as exc:
        check_rollout_correction(config(*overrides))
    for text in expected:
        assert text in str(exc.value)


def test_a_key_of_another_verl_version_without_a_runtime_is_refused_with_the_alternative():
    with pytest.raises(ConfigError, match="not implemented") as exc:
        check_rollout_correction(config(f"+{RC}.debug_rollout_actor_probs=True", LOG_PROBS))
    assert f"{RC}.debug_rollout_actor_probs=" in str(exc.value)
    check_rollout_correction(config(f"+{RC}.debug_rollout_actor_probs=null"))  # left unset: nothing to refuse


def test_verl_06_mode_switches_are_read_as_bypass_mode_and_loss_type():
    """verl 0.6's bypass_old_logprob_for_rollout is bypass_mode; its use_pure_rollout_correction (bypass mode only)
    is loss_type=reinforce. Its example script sets both, without '+'."""
    bypass = config(f"{RC}.bypass_old_logprob_for_rollout=true", LOG_PROBS)
    assert (bypass.algorithm.rollout_correction.bypass_mode, bypass.algorithm.rollout_correction.loss_type) == (
        True,
        "ppo_clip",
    )
    check_rollout_correction(bypass)
    pure = config(
        f"{RC}.bypass_old_logprob_for_rollout=true", f"{RC}.use_pure_rollout_correction=true", f"{RC}.rollout_is=token",
        LOG_PROBS,
    )  # fmt: skip
    corr = pure.algorithm.rollout_correction
    assert (corr.bypass_mode, corr.loss_type) == (True, "reinforce")
    check_rollout_correction(pure)
    # the same correction as the current spelling
    assert corr.to_dict() | {"bypass_old_logprob_for_rollout": False, "use_pure_rollout_correction": False} == (
        config(
            f"{RC}.bypass_mode=true", f"{RC}.loss_type=reinforce", f"{RC}.rollout_is=token", LOG_PROBS
        ).algorithm.rollout_correction.to_dict()
    )
    with pytest.raises(ConfigError, match="use_pure_rollout_correction=True .* needs bypass mode"):
        check_rollout_correction(config(f"{RC}.use_pure_rollout_correction=true", LOG_PROBS))


def test_a_verl_070_command_line_means_its_correction():
    """verl 0.7.0's example scripts set every key of its section, with or without '+'; the typed config carries them
    and the runtime's keywords are those values."""
    from verl.trainer.ppo.rollout_corr_helper import parse_rs_spec, rollout_correction_kwargs
    from verl.utils.hydra_overrides import verl_command_line

    args = [
        f"{RC}.rollout_is=token",
        f"{RC}.rollout_is_threshold=2.0",
        f"{RC}.rollout_rs=token",
        f"{RC}.rollout_rs_threshold=2.0",
        f"+{RC}.rollout_rs_threshold_lower=0.3",
        f"+{RC}.rollout_token_veto_threshold=1e-4",
        f"{RC}.bypass_mode=false",
        f"{RC}.loss_type=ppo_clip",
        LOG_PROBS,
    ]
    cfg = config(*verl_command_line(args))
    check_rollout_correction(cfg)
    corr = cfg.algorithm.rollout_correction
    kwargs = rollout_correction_kwargs(corr)
    assert (kwargs["rollout_rs_threshold_lower"], kwargs["rollout_token_veto_threshold"]) == (0.3, 1e-4)
    [rule] = parse_rs_spec(corr.rollout_rs, corr.rollout_rs_threshold, corr.rollout_rs_threshold_lower)
    assert (rule.option, rule.lower, rule.upper) == ("token_k1", 0.3, 2.0)


def test_a_loss_without_the_weights_keyword_is_refused_for_is():
    @register_policy_loss("_no_weights_kw")
    def loss(old_log_prob, log_prob, advantages, response_mask, loss_agg_mode="token-mean", config=None):
        raise AssertionError("not called")

    try:
        cfg = config(
            f"{RC}.rollout_is=token", LOG_PROBS, "actor_rollout_ref.actor.policy_loss.loss_mode=_no_weights_kw"
        )
        with pytest.raises(ConfigError, match="takes no rollout_is_weights keyword"):
            check_rollout_correction(cfg)
        # rejection alone does not need the keyword
        check_rollout_correction(
            config(
                f"{RC}.rollout_rs=token_k1",
                f"{RC}.rollout_rs_threshold=2.0",
                LOG_PROBS,
                "actor_rollout_ref.actor.policy_loss.loss_mode=_no_weights_kw",
            )
        )
    finally:
        POLICY_LOSS_REGISTRY.pop("_no_weights_kw")


def test_check_ppo_config_runs_it():
    with initialize_config_dir(config_dir=CONFIG_DIR, version_base=None):
        raw = compose(
            config_name="ppo_trainer",
            overrides=[
                f"{RC}.rollout_is=token",
                "trainer.device=cpu",
                NO_LOG_PROBS,
                "actor_rollout_ref.rollout.name=hf",
            ],
        )
    with pytest.raises(ConfigError, match="calculate_log_probs=False"):
        check_ppo_config(raw, check_paths=False, check_device=False)
