"""Entry point: ``python -m recipe.entropy.main_entropy key=value ...`` (Hydra, config ``entropy_trainer``).

Clip-Cov and KL-Cov (``actor_rollout_ref.actor.policy_loss.loss_mode``) keep the policy's entropy from collapsing
by restraining the update of the few tokens whose log-probability and advantage covary most. The losses are the
registered ``clip_cov`` / ``kl_cov`` of ``verl.trainer.ppo.losses``; the trainer is DAPO's.
"""

from __future__ import annotations

import hydra

from recipe.dapo.main_dapo import run_dapo
from verl.trainer.config import ConfigError, PPOConfig
from verl.trainer.main_ppo import apply_demo_for_command_line

__all__ = ["ENTROPY_LOSS_MODES", "check_entropy_config", "main", "run_entropy"]

ENTROPY_LOSS_MODES = ("clip_cov", "kl_cov", "vanilla")


@hydra.main(config_path="config", config_name="entropy_trainer", version_base=None)
def main(config) -> None:
    apply_demo_for_command_line(config)  # no data and no model: the built-in demo
    run_entropy(config)


def check_entropy_config(config) -> None:
    """Refuse a loss mode this recipe does not train with and covariance ratios outside (0, 1]."""
    try:
        actor = PPOConfig.from_config(config).actor_rollout_ref.actor
    except TypeError as exc:
        raise ConfigError(str(exc)) from exc
    mode = actor.policy_loss.loss_mode
    if mode not in ENTROPY_LOSS_MODES:
        raise ConfigError(
            f"actor_rollout_ref.actor.policy_loss.loss_mode={mode!r}: the entropy recipe trains with one of "
            f"{list(ENTROPY_LOSS_MODES)}"
        )
    key = {"clip_cov": "clip_cov_ratio", "kl_cov": "kl_cov_ratio"}.get(mode)
    if key is not None:
        ratio = actor.policy_loss[key]
        if not 0 < ratio <= 1:
            raise ConfigError(
                f"actor_rollout_ref.actor.policy_loss.{key}={ratio!r} must be in (0, 1] (the share of tokens "
                "whose update is restrained)"
            )


def run_entropy(config) -> None:
    """Check the recipe keys, then run as ``recipe.dapo.main_dapo``."""
    check_entropy_config(config)
    run_dapo(config)


if __name__ == "__main__":
    from verl.utils.hydra_overrides import run_hydra_entry

    run_hydra_entry(main)  # verl's `+key=value` for keys this YAML has
