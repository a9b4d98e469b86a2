"""Entry point: ``python -m recipe.fully_async_policy.fully_async_main key=value ...`` (Hydra, config
``fully_async_ppo_trainer``).

As ``verl.trainer.main_ppo``, with ``FullyAsyncRayTrainer`` and the rollout on a pool of its own; the recipe's own
conditions (``async_training.*``) are checked next to the PPO checks, before Ray starts. With no data and no model it
trains the built-in demo with one trainer and one rollout process.
"""

from __future__ import annotations

import hydra

from recipe.one_step_off_policy.main_ppo import DEMO_VALUES_ONE_STEP, check_one_step_off_config
from verl.trainer.config import ConfigError, PPOConfig, async_training_config
from verl.trainer.main_ppo import apply_demo_for_command_line, run_ppo
from verl.workers.config.errors import raise_config_errors

__all__ = ["check_fully_async_config", "main", "run_fully_async"]


@hydra.main(config_path="config", config_name="fully_async_ppo_trainer", version_base=None)
def main(config) -> None:
    apply_demo_for_command_line(config, values=DEMO_VALUES_ONE_STEP)  # no data and no model: the built-in demo
    run_fully_async(config)


def run_fully_async(config, trainer_cls=None) -> None:
    """Check the recipe's conditions, then validate, start Ray and train as ``main_ppo.run_ppo`` does."""
    from recipe.fully_async_policy.fully_async_trainer import FullyAsyncRayTrainer

    check_fully_async_config(config)
    run_ppo(config, trainer_cls=trainer_cls or FullyAsyncRayTrainer)


def _is_int(value) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def check_fully_async_config(config) -> None:
    """Refuse what the fully async trainer cannot run, naming the key, the value and what to set."""
    check_one_step_off_config(config)  # a pool of its own for the rollout, no remax
    try:
        cfg, at = PPOConfig.from_config(config), async_training_config(config)
    except TypeError as exc:
        raise ConfigError(str(exc)) from exc
    errors = []
    for key in ("staleness_threshold", "trigger_parameter_sync_step", "require_batches"):
        value, low = getattr(at, key), 0 if key == "staleness_threshold" else 1
        whole = _is_int(value) or (key == "staleness_threshold" and isinstance(value, float) and value.is_integer())
        if not whole or value < low:
            errors.append(
                f"async_training.{key}={value!r} must be an integer >= {low}"
                + (
                    " (here the number of weight versions a trained sample may lag the actor; verl's fraction of a "
                    "sync window is not read that way: set 0 for on-policy, 1 for one version, ...)"
                    if key == "staleness_threshold"
                    else ""
                )
            )
    raise_config_errors(errors)
    if at.staleness_threshold < at.trigger_parameter_sync_step - 1:
        errors.append(
            f"async_training.staleness_threshold={at.staleness_threshold} with trigger_parameter_sync_step="
            f"{at.trigger_parameter_sync_step}: between two syncs even fresh samples lag the actor by up to "
            f"{at.trigger_parameter_sync_step - 1} versions and would all be dropped; set staleness_threshold >= "
            f"{at.trigger_parameter_sync_step - 1} or a smaller trigger_parameter_sync_step"
        )
    arr = cfg.actor_rollout_ref
    if at.partial_rollout and arr.rollout.name not in ("hf", "vllm"):
        errors.append(
            f"async_training.partial_rollout=True with actor_rollout_ref.rollout.name={arr.rollout.name!r}: only the "
            "HF and vLLM rollouts' generations can be paused at a weight sync; set rollout.name=hf or vllm, or "
            "async_training.partial_rollout=False (a sync then waits for the mini-batch in flight)"
        )
    if at.use_rollout_log_probs:
        errors.append(
            "async_training.use_rollout_log_probs=True: here the rollout's log-probs are used through rollout "
            "correction; set async_training.use_rollout_log_probs=False and algorithm.rollout_correction."
            "bypass_mode=True (this recipe's default)"
        )
    if at.compute_prox_log_prob:
        errors.append(
            "async_training.compute_prox_log_prob=True is not implemented; set it to False (rollout correction, "
            "algorithm.rollout_correction, corrects stale samples)"
        )
    mini, train = arr.actor.ppo_mini_batch_size, cfg.data.train_batch_size
    if train != at.require_batches * mini:
        errors.append(
            f"data.train_batch_size={train} must equal async_training.require_batches={at.require_batches} x "
            f"actor_rollout_ref.actor.ppo_mini_batch_size={mini}: the fully async trainer updates once per "
            f"require_batches mini-batches; set data.train_batch_size={at.require_batches * mini}"
        )
    raise_config_errors(errors)


if __name__ == "__main__":
    from verl.utils.hydra_overrides import run_hydra_entry

    run_hydra_entry(main)  # verl's `+key=value` for keys this YAML has
