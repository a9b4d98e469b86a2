"""Entry point: ``python -m recipe.sppo.main_sppo key=value ...`` (Hydra, config ``sppo_trainer``).

The same flow as ``verl.trainer.main_ppo``: the config is checked in this process before Ray starts (SPPO's own
keys included), then ``RaySPPOTrainer`` trains with ``SPPOActorRolloutRefWorker`` workers in a Ray task runner.
"""

from __future__ import annotations

import hydra

from recipe.sppo.config_check import check_sppo_config
from recipe.sppo.sppo_ray_trainer import RaySPPOTrainer
from recipe.sppo.sppo_worker import SPPOActorRolloutRefWorker
from verl.trainer.main_ppo import run_ppo

__all__ = ["main", "run_sppo"]


@hydra.main(config_path="config", config_name="sppo_trainer", version_base=None)
def main(config) -> None:
    run_sppo(config)


def run_sppo(config) -> None:
    """Validate ``config`` (raises ConfigError before Ray starts), then train SPPO."""
    run_ppo(config, check=check_sppo_config, trainer_cls=RaySPPOTrainer, actor_rollout_cls=SPPOActorRolloutRefWorker)


if __name__ == "__main__":
    main()
