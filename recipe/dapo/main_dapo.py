"""Entry point: ``python -m recipe.dapo.main_dapo key=value ...`` (Hydra, config ``dapo_trainer``).

As ``verl.trainer.main_ppo``, with ``RayDAPOTrainer``; the recipe's own keys are checked here, next to the PPO
checks, before Ray starts.
"""

from __future__ import annotations

import inspect

import hydra

from verl.trainer.config import ConfigError, PPOConfig
from verl.trainer.main_ppo import run_ppo

__all__ = ["check_dapo_config", "main", "run_dapo"]


@hydra.main(config_path="config", config_name="dapo_trainer", version_base=None)
def main(config) -> None:
    run_dapo(config)


def run_dapo(config, trainer_cls=None) -> None:
    """Check the DAPO keys, then validate, start Ray and train as ``main_ppo.run_ppo`` does."""
    from recipe.dapo.dapo_ray_trainer import RayDAPOTrainer

    check_dapo_config(config)
    run_ppo(config, trainer_cls=trainer_cls or RayDAPOTrainer)


def _accepts_overlong_buffer(manager: str) -> bool:
    from verl.workers.reward_manager import get_reward_manager_cls

    try:
        cls = get_reward_manager_cls(manager)
    except ValueError:
        return True  # an unknown manager is reported by the PPO checks
    return "overlong_buffer_cfg" in inspect.signature(cls.__init__).parameters


def check_dapo_config(config) -> None:
    """Refuse bad DAPO keys (``algorithm.filter_groups``, ``data.gen_batch_size``, ``reward_model.overlong_buffer``)
    with a ConfigError naming the key, the value and what is expected. Wrong types fail when the typed config is
    built; the filter metric's name is checked once the first batch is scored (it may be any reward extra info)."""
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
    buffer = cfg.reward_model.overlong_buffer
    if buffer.enable:
        if not 0 < buffer.len < data.max_response_length:
            errors.append(
                f"reward_model.overlong_buffer.len={buffer.len} must be > 0 and < data.max_response_length="
                f"{data.max_response_length} (the buffer is the last len tokens of the response budget)"
            )
        if buffer.penalty_factor < 0:
            errors.append(f"reward_model.overlong_buffer.penalty_factor={buffer.penalty_factor} must be >= 0")
        manager = cfg.reward_model.reward_manager
        if not _accepts_overlong_buffer(manager):
            errors.append(
                f"reward_model.overlong_buffer.enable=True needs a reward manager that applies it (dapo); "
                f"reward_model.reward_manager={manager!r} does not"
            )
    if len(errors) == 1:
        raise ConfigError(errors[0])
    if errors:
        raise ConfigError(f"{len(errors)} config errors:\n  - " + "\n  - ".join(errors))


if __name__ == "__main__":
    main()
