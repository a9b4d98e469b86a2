"""Entry point: ``python -m recipe.dapo.main_dapo key=value ...`` (Hydra, config ``dapo_trainer``).

As ``verl.trainer.main_ppo``, with ``RayDAPOTrainer``; the recipe's own keys are checked here, next to the PPO
checks, before Ray starts.
"""

from __future__ import annotations

import hydra

from verl.trainer.config import ConfigError, PPOConfig
from verl.trainer.main_ppo import apply_demo_for_command_line, run_ppo
from verl.workers.config.errors import raise_config_errors

__all__ = ["check_dapo_config", "main", "run_dapo"]


@hydra.main(config_path="config", config_name="dapo_trainer", version_base=None)
def main(config) -> None:
    apply_demo_for_command_line(config)  # no data and no model: the built-in demo
    run_dapo(config)


def run_dapo(config, trainer_cls=None) -> None:
    """Check the DAPO keys, then validate, start Ray and train as ``main_ppo.run_ppo`` does."""
    from recipe.dapo.dapo_ray_trainer import RayDAPOTrainer

    check_dapo_config(config)
    run_ppo(config, trainer_cls=trainer_cls or RayDAPOTrainer)


def check_dapo_config(config) -> None:
    """Refuse bad DAPO keys (``algorithm.filter_groups``, ``data.gen_batch_size``) with a ConfigError naming the key,
    the value and what is expected (``reward_model.overlong_buffer`` is a main_ppo key, checked with the others).
    Wrong types fail when the typed config is built; the filter metric's name is checked once the first batch is
    scored (it may be any reward extra info)."""
    try:
        cfg = PPOConfig.from_config(config)
    except TypeError as exc:
        raise ConfigError(str(exc)) from exc
    errors = []
    data, groups = cfg.data, cfg.algorithm.filter_groups
    gen_bs, train_bs = data.gen_batch_size, data.train_batch_size
    if gen_bs is not None and gen_bs < train_bs:
        errors.append(
            f"data.gen_batch_size={gen_bs} must be >= data.train_batch_size={train_bs} (a generation batch is drawn "
            "from the dataloader whole; dynamic sampling adds batches until train_batch_size prompts are kept)"
        )
    if groups.enable and not (isinstance(groups.metric, str) and groups.metric):
        errors.append(
            f"algorithm.filter_groups.metric={groups.metric!r}: filtering is enabled and needs the name of a "
            "per-response value: acc, score, seq_reward, seq_final_reward or another reward extra info"
        )
    raise_config_errors(errors)


if __name__ == "__main__":
    from verl.utils.hydra_overrides import run_hydra_entry

    run_hydra_entry(main)  # verl's `+key=value` for keys this YAML has
