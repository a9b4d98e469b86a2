"""`algorithm.rollout_correction`: settings the correction cannot honour, refused before Ray starts."""

from __future__ import annotations

import inspect

from verl.trainer.config import ConfigError
from verl.trainer.ppo.losses import POLICY_LOSS_REGISTRY
from verl.trainer.ppo.rollout_corr_helper import (
    IS_LEVELS,
    correction_enabled,
    parse_is_threshold,
    parse_rs_spec,
    parse_veto_threshold,
)

__all__ = ["check_rollout_correction"]

KEY = "algorithm.rollout_correction"
LOSS_TYPES = ("ppo_clip", "reinforce")


# keys of other verl versions that this section does not implement, with what to set instead (verl 0.6's
# bypass_old_logprob_for_rollout and use_pure_rollout_correction are read: see RolloutCorrectionConfig)
OTHER_VERL_KEYS = {
    "debug_rollout_actor_probs": "not implemented; decoupled mode (bypass_mode=False) logs the rollout-vs-actor gap",
}


def check_rollout_correction(config) -> None:
    """Raise ConfigError for the first rollout-correction setting that cannot work (``config``: typed PPO config)."""
    corr = config.algorithm.rollout_correction
    for key, instead in OTHER_VERL_KEYS.items():
        value = corr.get(key) if key in corr else None
        if value not in (None, False):
            raise ConfigError(f"{KEY}.{key}={value!r} is not read here: {instead}")
    if corr.use_pure_rollout_correction and not corr.bypass_mode:
        raise ConfigError(
            f"{KEY}.use_pure_rollout_correction=True (verl 0.6's pure IS-weighted policy gradient, "
            f"loss_type=reinforce) needs bypass mode: set {KEY}.bypass_mode=True (verl 0.6: "
            "bypass_old_logprob_for_rollout=True)"
        )
    if corr.rollout_is is not None and corr.rollout_is not in IS_LEVELS:
        raise ConfigError(f"{KEY}.rollout_is={corr.rollout_is!r}: expected null, 'token' or 'sequence'")
    try:
        if corr.rollout_is:
            parse_is_threshold(corr.rollout_is_threshold)
        parse_rs_spec(corr.rollout_rs, corr.rollout_rs_threshold, corr.rollout_rs_threshold_lower)
        parse_veto_threshold(corr.rollout_token_veto_threshold)
    except ValueError as exc:
        raise ConfigError(str(exc)) from None
    if corr.rollout_is_batch_normalize and not corr.rollout_is:
        raise ConfigError(
            f"{KEY}.rollout_is_batch_normalize=True has no weights to normalize with {KEY}.rollout_is=null; set "
            "rollout_is=token or sequence, or leave rollout_is_batch_normalize=False"
        )
    if corr.loss_type not in LOSS_TYPES:
        raise ConfigError(f"{KEY}.loss_type={corr.loss_type!r}: expected one of {list(LOSS_TYPES)}")
    actor = config.actor_rollout_ref.actor
    if corr.loss_type == "reinforce":
        if not corr.bypass_mode:
            raise ConfigError(
                f"{KEY}.loss_type='reinforce' applies in bypass mode only; set {KEY}.bypass_mode=True, or leave "
                "loss_type=ppo_clip (decoupled mode uses actor.policy_loss.loss_mode)"
            )
        if actor.policy_loss.loss_mode != "vanilla":
            raise ConfigError(
                f"{KEY}.loss_type='reinforce' replaces the policy loss, but actor_rollout_ref.actor.policy_loss."
                f"loss_mode={actor.policy_loss.loss_mode!r} asks for another; use loss_type=ppo_clip with that loss, "
                "or loss_mode=vanilla"
            )
    if not correction_enabled(corr):
        return
    rollout = config.actor_rollout_ref.rollout
    if not rollout.calculate_log_probs:
        raise ConfigError(
            f"{KEY} is on (rollout_is={corr.rollout_is!r}, rollout_rs={corr.rollout_rs!r}, rollout_token_veto_"
            f"threshold={corr.rollout_token_veto_threshold!r}, bypass_mode={corr.bypass_mode}"
            f"{' from bypass_old_logprob_for_rollout=True' if corr.bypass_old_logprob_for_rollout else ''}) but "
            "actor_rollout_ref.rollout.calculate_log_probs=False: the correction needs the rollout's log-probs; set "
            "actor_rollout_ref.rollout.calculate_log_probs=True"
        )
    applies_weights = corr.rollout_is and not (corr.bypass_mode and corr.loss_type == "ppo_clip")
    loss_fn = POLICY_LOSS_REGISTRY.get(actor.policy_loss.loss_mode)
    if applies_weights and loss_fn is not None and "rollout_is_weights" not in inspect.signature(loss_fn).parameters:
        raise ConfigError(
            f"{KEY}.rollout_is={corr.rollout_is!r}: the policy loss actor_rollout_ref.actor.policy_loss.loss_mode="
            f"{actor.policy_loss.loss_mode!r} takes no rollout_is_weights keyword, so the IS weights would be "
            "dropped; add the keyword to the loss, use a built-in loss_mode, or set rollout_is=null"
        )
