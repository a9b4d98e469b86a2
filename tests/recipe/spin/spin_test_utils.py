"""The SPIN config composed as ``python -m recipe.spin.main_spin`` would, over the tiny PPO test workspace."""

from __future__ import annotations

import os

import recipe.spin
from tests.trainer.ppo_e2e_utils import base_overrides, with_rollout_name

CONFIG_DIR = os.path.join(os.path.dirname(recipe.spin.__file__), "config")


def spin_overrides(ws: dict, steps: int = 2) -> list[str]:
    """PPO's tiny-model command line with SPIN's requirements: no KL terms, rollout.n > 1."""
    overrides = [
        o for o in base_overrides(ws, "grpo", steps=steps) if not o.startswith("actor_rollout_ref.actor.use_kl")
    ]
    return overrides + [f"custom_reward_function.path={ws['reward']}", "actor_rollout_ref.rollout.n=4"]


def compose_spin_config(overrides: list[str]):
    """The spin_trainer config with ``overrides``."""
    from hydra import compose, initialize_config_dir

    with initialize_config_dir(config_dir=CONFIG_DIR, version_base=None):
        return compose(config_name="spin_trainer", overrides=with_rollout_name(overrides))
