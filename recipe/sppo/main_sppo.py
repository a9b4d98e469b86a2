"""Entry point: ``python -m recipe.sppo.main_sppo key=value ...`` (Hydra, config ``sppo_trainer``).

The same flow as ``verl.trainer.main_ppo``: the config is checked in this process before Ray starts (the PPO
checks with ``adv_estimator: null`` allowed, and SPPO's own keys), then main_ppo's ``TaskRunner`` trains with
``RaySPPOTrainer`` and ``SPPOActorRolloutRefWorker`` workers.
"""

from __future__ import annotations

import hydra
from omegaconf import open_dict

from recipe.sppo.config_check import check_sppo_config
from verl.demo.assets import resolve_builtin_paths
from verl.trainer.config.checks.ppo import resolve_device_name
from verl.trainer.main_ppo import apply_demo_for_command_line, train_in_ray

__all__ = ["main", "prepare_sppo_config", "recipe_classes", "run_sppo"]


@hydra.main(config_path="config", config_name="sppo_trainer", version_base=None)
def main(config) -> None:
    apply_demo_for_command_line(config)  # no data and no model: the built-in demo
    run_sppo(config)


def prepare_sppo_config(config) -> None:
    """``main_ppo.prepare_config`` with SPPO's check in place of the PPO one; raises ConfigError before Ray."""
    resolve_builtin_paths(config)
    check_sppo_config(config)
    with open_dict(config):
        config.trainer.device = resolve_device_name(config.trainer.device)


def recipe_classes() -> dict:
    """The trainer and worker classes main_ppo's ``build_trainer`` / ``TaskRunner.run`` take for SPPO."""
    from recipe.sppo.sppo_ray_trainer import RaySPPOTrainer
    from recipe.sppo.sppo_worker import SPPOActorRolloutRefWorker

    return {"trainer_cls": RaySPPOTrainer, "actor_rollout_cls": SPPOActorRolloutRefWorker}


def run_sppo(config) -> None:
    """Validate ``config`` (raises ConfigError before Ray starts), start Ray unless running, then train SPPO."""
    prepare_sppo_config(config)
    train_in_ray(config, **recipe_classes())


if __name__ == "__main__":
    from verl.utils.hydra_overrides import run_hydra_entry

    run_hydra_entry(main)  # verl's `+key=value` for keys this YAML has
