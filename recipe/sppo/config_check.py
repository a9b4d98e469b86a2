"""SPPO's config check: the PPO checks (with ``algorithm.adv_estimator: null`` allowed) plus SPPO's own keys."""

from __future__ import annotations

import math

from recipe.sppo.sppo_core import SPPO_LOSS_MODE
from verl.trainer.config import ConfigError
from verl.trainer.config.checks.ppo import check_ppo_config

__all__ = ["check_sppo_config"]


def _number(section, key: str, name: str, minimum: float, strict: bool) -> str | None:
    """The problem with number ``section[name]`` (None when fine): missing, not a number, not finite, too small."""
    if name not in section:
        return f"{key}: missing; expected a number (the SPPO recipe's sppo_trainer.yaml sets it)"
    value = section[name]
    if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value):
        return f"{key}={value!r} has the wrong type; expected a finite number"
    if value < minimum or (strict and value == minimum):
        return f"{key}={value!r} must be {'>' if strict else '>='} {minimum}"
    return None


def check_sppo_config(config, *, check_paths: bool = True, check_device: bool = True) -> None:
    """Validate a composed ``sppo_trainer`` config; one ConfigError lists every problem found.

    On top of ``check_ppo_config``: ``algorithm.adv_estimator`` must be null (SPPO's advantage step replaces the
    estimator), ``actor.policy_loss.loss_mode`` must be ``sppo`` with ``loss_agg_mode=token-mean``,
    ``actor.sppo_eta`` a number > 0 and ``algorithm.sppo_eta`` (the soft-mean temperature) a number >= 0.
    """
    from verl.trainer.config import PPOConfig

    errors: list[str] = []
    try:
        check_ppo_config(config, check_paths=check_paths, check_device=check_device, extra_adv_estimators=(None,))
    except ConfigError as exc:
        errors.append(str(exc))
    try:
        typed = PPOConfig.from_config(config)
    except TypeError:
        typed = None  # check_ppo_config reported it
    if typed is not None:
        actor, algorithm = typed.actor_rollout_ref.actor, typed.algorithm
        if algorithm.adv_estimator is not None:
            errors.append(
                f"algorithm.adv_estimator={algorithm.adv_estimator!r}: SPPO computes its own sequence rewards "
                "(s - SoftMean(s)); expected null"
            )
        if actor.policy_loss.loss_mode != SPPO_LOSS_MODE:
            errors.append(
                f"actor_rollout_ref.actor.policy_loss.loss_mode={actor.policy_loss.loss_mode!r}: the SPPO trainer "
                f"needs the SPPO loss; expected {SPPO_LOSS_MODE!r}"
            )
        if actor.loss_agg_mode != "token-mean":
            errors.append(
                f"actor_rollout_ref.actor.loss_agg_mode={actor.loss_agg_mode!r} is not supported by the SPPO loss; "
                "expected 'token-mean' (the mean over sequences with at least one response token)"
            )
        errors += [
            problem
            for problem in (
                _number(actor, "actor_rollout_ref.actor.sppo_eta", "sppo_eta", 0.0, strict=True),
                _number(algorithm, "algorithm.sppo_eta", "sppo_eta", 0.0, strict=False),
            )
            if problem
        ]
    # check_ppo_config may have joined several problems into one message already; flatten for one list
    lines = [ln.removeprefix("  - ") for e in errors for ln in e.splitlines() if not ln.endswith("config errors:")]
    if len(lines) == 1:
        raise ConfigError(lines[0])
    if lines:
        raise ConfigError(f"{len(lines)} config errors:\n  - " + "\n  - ".join(lines))
