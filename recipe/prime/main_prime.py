"""Entry point: ``python -m recipe.prime.main_prime key=value ...`` (Hydra, config ``prime_trainer``).

The config (ppo_trainer's checks plus PRIME's own keys) is validated here before Ray starts; training then runs in
a Ray actor as with ``main_ppo``.
"""

from __future__ import annotations

import hydra

from recipe.prime.prime_config import check_prime_config
from verl.trainer.main_ppo import apply_demo_for_command_line, build_trainer, prepare_config, train_in_ray

__all__ = ["build_prime_trainer", "main", "prepare_prime_config", "run_prime"]


@hydra.main(config_path="config", config_name="prime_trainer", version_base=None)
def main(config) -> None:
    apply_demo_for_command_line(config)  # no data and no model: the built-in demo
    run_prime(config)


def prepare_prime_config(config) -> None:
    """ppo_trainer's checks, then PRIME's; raises ConfigError naming the key before anything starts."""
    prepare_config(config)
    check_prime_config(config)


def _recipe_classes() -> dict:
    from recipe.prime.prime_fsdp_workers import PRIMERewardModelWorker
    from recipe.prime.prime_ray_trainer import RayPRIMETrainer

    return {"trainer_cls": RayPRIMETrainer, "reward_model_cls": PRIMERewardModelWorker}


def build_prime_trainer(config, ray_worker_group_cls=None):
    """A `RayPRIMETrainer` with the PRIME reward-model worker, the prime reward manager and the datasets."""
    return build_trainer(config, ray_worker_group_cls, **_recipe_classes())


def run_prime(config) -> None:
    """Validate, start Ray (unless already running), and train in main_ppo's task runner with PRIME's classes."""
    prepare_prime_config(config)
    train_in_ray(config, **_recipe_classes())


if __name__ == "__main__":
    from verl.utils.hydra_overrides import run_hydra_entry

    run_hydra_entry(main)  # verl's `+key=value` for keys this YAML has
