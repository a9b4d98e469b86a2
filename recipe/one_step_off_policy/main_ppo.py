"""Entry point: ``python -m recipe.one_step_off_policy.main_ppo key=value ...`` (Hydra, config
``one_step_off_ppo_trainer``).

As ``verl.trainer.main_ppo``, with ``OneStepOffRayTrainer`` and the rollout on a pool of its own
(``rollout.nnodes`` x ``rollout.n_gpus_per_node``); the recipe's own conditions are checked next to the PPO checks,
before Ray starts. With no data and no model it trains the built-in demo with one trainer and one rollout process.
"""

from __future__ import annotations

import hydra

from verl.demo.default_run import DEMO_VALUES
from verl.trainer.config import ConfigError, PPOConfig
from verl.trainer.main_ppo import apply_demo_for_command_line, run_ppo
from verl.workers.config.errors import raise_config_errors

__all__ = ["DEMO_VALUES_ONE_STEP", "check_one_step_off_config", "main", "run_one_step_off_policy"]

# the built-in demo (verl/demo/default_run.py) on a 2-core box: one trainer process and one rollout process
DEMO_VALUES_ONE_STEP = {**DEMO_VALUES, "trainer.n_gpus_per_node": 1, "rollout.n_gpus_per_node": 1}


@hydra.main(config_path="config", config_name="one_step_off_ppo_trainer", version_base=None)
def main(config) -> None:
    apply_demo_for_command_line(config, values=DEMO_VALUES_ONE_STEP)  # no data and no model: the built-in demo
    run_one_step_off_policy(config)


def run_one_step_off_policy(config, trainer_cls=None) -> None:
    """Check the recipe's conditions, then validate, start Ray and train as ``main_ppo.run_ppo`` does."""
    from recipe.one_step_off_policy.ray_trainer import OneStepOffRayTrainer

    check_one_step_off_config(config)
    run_ppo(config, trainer_cls=trainer_cls or OneStepOffRayTrainer)


def check_one_step_off_config(config) -> None:
    """Refuse what the one-step off-policy trainer cannot run, naming the key, the value and what to set."""
    try:
        cfg = PPOConfig.from_config(config)
    except TypeError as exc:
        raise ConfigError(str(exc)) from exc
    errors = []
    if cfg.actor_rollout_ref.hybrid_engine:
        errors.append(
            "actor_rollout_ref.hybrid_engine=True: the one-step off-policy trainer generates on a pool of its own "
            "while the actor trains; set actor_rollout_ref.hybrid_engine=False (and rollout.n_gpus_per_node)"
        )
    if cfg.algorithm.adv_estimator == "remax":
        errors.append(
            "algorithm.adv_estimator='remax' needs a greedy generation with the weights of the step it trains; the "
            "one-step off-policy trainer does not run it. Use grpo, rloo, reinforce_plus_plus, opo or gae"
        )
    raise_config_errors(errors)


if __name__ == "__main__":
    from verl.utils.hydra_overrides import run_hydra_entry

    run_hydra_entry(main)  # verl's `+key=value` for keys this YAML has
