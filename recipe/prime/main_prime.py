"""Entry point: ``python -m recipe.prime.main_prime key=value ...`` (Hydra, config ``prime_trainer``).

The config (ppo_trainer's checks plus PRIME's own keys) is validated here before Ray starts; training then runs in
a Ray actor as with ``main_ppo``.
"""

from __future__ import annotations

import hydra
import ray

from recipe.prime.prime_config import check_prime_config
from verl.trainer.main_ppo import TaskRunner, build_trainer, prepare_config, ray_init_kwargs

__all__ = ["build_prime_trainer", "main", "prepare_prime_config", "run_prime"]


@hydra.main(config_path="config", config_name="prime_trainer", version_base=None)
def main(config) -> None:
    run_prime(config)


def prepare_prime_config(config) -> None:
    """ppo_trainer's checks, then PRIME's; raises ConfigError naming the key before anything starts."""
    prepare_config(config)
    check_prime_config(config)


def build_prime_trainer(config, ray_worker_group_cls=None):
    """A `RayPRIMETrainer` with the PRIME reward-model worker, the prime reward manager and the datasets."""
    from recipe.prime.prime_fsdp_workers import PRIMERewardModelWorker
    from recipe.prime.prime_ray_trainer import RayPRIMETrainer

    return build_trainer(
        config, ray_worker_group_cls, trainer_cls=RayPRIMETrainer, reward_model_cls=PRIMERewardModelWorker
    )


def run_prime(config) -> None:
    """Validate, start Ray (unless already running), and train in a Ray actor."""
    prepare_prime_config(config)
    if not ray.is_initialized():
        ray.init(**ray_init_kwargs(config))
    from recipe.prime.prime_fsdp_workers import PRIMERewardModelWorker
    from recipe.prime.prime_ray_trainer import RayPRIMETrainer

    # main_ppo's task runner, building the PRIME trainer with its reward-model worker
    runner = TaskRunner.remote()
    ray.get(runner.run.remote(config, trainer_cls=RayPRIMETrainer, reward_model_cls=PRIMERewardModelWorker))


if __name__ == "__main__":
    main()
