"""Composing the recipes' Hydra configs in tests."""

from __future__ import annotations

import os

import recipe
from tests.trainer.ppo_e2e_utils import with_rollout_name


def compose_recipe_config(name: str, config_name: str, overrides=()):
    """``recipe/<name>/config/<config_name>.yaml`` with ``overrides``, composed as the recipe's Hydra app would."""
    from hydra import compose, initialize_config_dir

    config_dir = os.path.join(os.path.dirname(recipe.__file__), name, "config")
    with initialize_config_dir(config_dir=config_dir, version_base=None):
        return compose(config_name=config_name, overrides=with_rollout_name(overrides))
