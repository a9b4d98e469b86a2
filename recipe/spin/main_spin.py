"""Entry point: ``python -m recipe.spin.main_spin key=value ...`` (Hydra, config ``spin_trainer``).

As ``main_ppo``: the config is checked in this process before Ray starts (PPO's checks, then SPIN's own keys), and
training runs in a Ray actor. The policy worker is `SPINActorRolloutRefWorker`, which also holds the reference.
"""

from __future__ import annotations

import hydra
from omegaconf import OmegaConf

from recipe.spin.core_algos import DPO_LOSS_TYPES, PAIR_STRATEGIES
from verl.trainer.config import ConfigError, PPOConfig
from verl.trainer.main_ppo import apply_demo_for_command_line, build_trainer, prepare_config, train_in_ray

__all__ = ["build_spin_trainer", "check_spin_config", "main", "prepare_spin_config", "run_spin"]


@hydra.main(config_path="config", config_name="spin_trainer", version_base=None)
def main(config) -> None:
    apply_demo_for_command_line(config)  # no data and no model: the built-in demo
    run_spin(config)


def _number(value) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool)


def _integer(value) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _spin_key_rules(typed) -> list[tuple]:
    """(dotted key, section holding it, name in the section, test, what is expected) for every SPIN key."""
    actor, algorithm = typed.actor_rollout_ref.actor, typed.algorithm
    selection = algorithm.get("pair_selection")
    rules = [
        ("actor_rollout_ref.actor.dpo_beta", actor, "dpo_beta", lambda v: _number(v) and v > 0, "a number > 0"),
        ("actor_rollout_ref.actor.dpo_loss_type", actor, "dpo_loss_type", DPO_LOSS_TYPES.__contains__,
         f"one of {list(DPO_LOSS_TYPES)}"),
        ("actor_rollout_ref.actor.dpo_label_smoothing", actor, "dpo_label_smoothing",
         lambda v: _number(v) and 0 <= v < 0.5, "a number in [0, 0.5)"),
        ("trainer.ref_update_freq", typed.trainer, "ref_update_freq", _integer,
         "an integer (> 0: refresh the reference every that many steps; <= 0: never)"),
        ("algorithm.pair_selection", algorithm, "pair_selection", OmegaConf.is_dict,
         "a section with strategy and min_score_gap"),
    ]  # fmt: skip
    if OmegaConf.is_dict(selection):
        rules += [
            ("algorithm.pair_selection.strategy", selection, "strategy", PAIR_STRATEGIES.__contains__,
             f"one of {list(PAIR_STRATEGIES)}"),
            ("algorithm.pair_selection.min_score_gap", selection, "min_score_gap", lambda v: _number(v) and v >= 0,
             "a number >= 0"),
        ]  # fmt: skip
    return rules


def check_spin_config(config) -> None:
    """SPIN's keys and the PPO settings SPIN cannot honour; raises one ConfigError listing every problem."""
    typed = PPOConfig.from_config(config)
    actor, algorithm = typed.actor_rollout_ref.actor, typed.algorithm
    errors = []
    for key, section, name, ok, expected in _spin_key_rules(typed):
        if name not in section:
            errors.append(f"{key}: missing; expected {expected} (recipe/spin/config/spin_trainer.yaml sets it)")
        elif not ok(section[name]):
            errors.append(f"{key}={section[name]!r}: expected {expected}")

    rollout, model = typed.actor_rollout_ref.rollout, typed.actor_rollout_ref.model
    unsupported = [
        (rollout.n < 2, f"actor_rollout_ref.rollout.n={rollout.n}: SPIN pairs responses to one prompt; expected >= 2"),
        (algorithm.adv_estimator == "gae", "algorithm.adv_estimator='gae': SPIN trains no critic; leave it at grpo"),
        (algorithm.use_kl_in_reward, "algorithm.use_kl_in_reward=True: the DPO loss regularises toward the "
         "reference itself; expected False"),
        (actor.use_kl_loss, "actor_rollout_ref.actor.use_kl_loss=True: the DPO loss regularises toward the "
         "reference itself; expected False"),
        (actor.use_dynamic_bsz, "actor_rollout_ref.actor.use_dynamic_bsz=True: the DPO update keeps pairs together "
         "in fixed micro batches; expected False"),
        (model.is_lora, f"actor_rollout_ref.model.lora_rank={model.lora_rank}: the reference refresh copies full "
         "weights; expected 0 (no LoRA)"),
        (rollout.multi_turn.enable, "actor_rollout_ref.rollout.multi_turn.enable=True: SPIN scores single-turn "
         "responses; expected False"),
    ]  # fmt: skip
    errors += [message for bad, message in unsupported if bad]
    if len(errors) == 1:
        raise ConfigError(errors[0])
    if errors:
        raise ConfigError(f"{len(errors)} SPIN config errors:\n  - " + "\n  - ".join(errors))


def prepare_spin_config(config) -> None:
    """``main_ppo.prepare_config`` (paths, PPO checks, device), then :func:`check_spin_config`."""
    prepare_config(config)
    check_spin_config(config)


def _recipe_classes() -> dict:
    from recipe.spin.fsdp_workers import SPINActorRolloutRefWorker
    from recipe.spin.spin_trainer import RaySPINTrainer

    return {"trainer_cls": RaySPINTrainer, "actor_rollout_cls": SPINActorRolloutRefWorker}


def build_spin_trainer(config, ray_worker_group_cls=None):
    """The `RaySPINTrainer` of ``config`` (tokenizer, workers, rewards, data), before ``init_workers``."""
    return build_trainer(config, ray_worker_group_cls, **_recipe_classes())


def run_spin(config) -> None:
    """Validate, start Ray (unless already running), and train in main_ppo's ``TaskRunner`` with SPIN's classes."""
    prepare_spin_config(config)
    train_in_ray(config, **_recipe_classes())


if __name__ == "__main__":
    from verl.utils.hydra_overrides import run_hydra_entry

    run_hydra_entry(main)  # verl's `+key=value` for keys this YAML has
