"""Entry point: ``python -m recipe.spin.main_spin key=value ...`` (Hydra, config ``spin_trainer``).

As ``main_ppo``: the config is checked in this process before Ray starts (PPO's checks, then SPIN's own keys), and
training runs in a Ray actor. The policy worker is `SPINActorRolloutRefWorker`, which also holds the reference.
"""

from __future__ import annotations

import logging
import os

import hydra
import ray
from omegaconf import OmegaConf

from recipe.spin.core_algos import DPO_LOSS_TYPES, PAIR_STRATEGIES
from verl.trainer.config import PPOConfig
from verl.trainer.config_validation import ConfigError
from verl.trainer.main_ppo import prepare_config, ray_init_kwargs

logger = logging.getLogger(__name__)

__all__ = ["build_spin_trainer", "check_spin_config", "main", "prepare_spin_config", "run_spin"]


@hydra.main(config_path="config", config_name="spin_trainer", version_base=None)
def main(config) -> None:
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


def run_spin(config) -> None:
    """Validate, start Ray (unless already running), and train in a ``SpinTaskRunner`` actor."""
    prepare_spin_config(config)
    if not ray.is_initialized():
        ray.init(**ray_init_kwargs(config))
    runner = SpinTaskRunner.remote()
    ray.get(runner.run.remote(config))


def build_spin_trainer(config, ray_worker_group_cls=None):
    """The `RaySPINTrainer` of ``config`` (tokenizer, workers, rewards, data), before ``init_workers``."""
    from recipe.spin.fsdp_workers import SPINActorRolloutRefWorker
    from recipe.spin.spin_trainer import RaySPINTrainer
    from verl.single_controller.ray import RayWorkerGroup
    from verl.trainer.ppo.ray_trainer import ResourcePoolManager, Role
    from verl.trainer.ppo.reward import load_reward_manager
    from verl.utils.dataset.rl_dataset import collate_fn, create_rl_dataset, create_rl_sampler
    from verl.utils.fs import copy_to_local
    from verl.utils.tokenizer import hf_processor, hf_tokenizer

    typed = PPOConfig.from_config(config)
    if typed.actor_rollout_ref.actor.strategy not in ("fsdp", "fsdp2"):
        raise NotImplementedError("recipe.spin runs on the FSDP workers; set actor_rollout_ref.actor.strategy=fsdp")
    model_cfg = typed.actor_rollout_ref.model
    local_path = copy_to_local(model_cfg.path, use_shm=model_cfg.use_shm)
    trust = typed.data.trust_remote_code
    tokenizer = hf_tokenizer(local_path, trust_remote_code=trust)
    processor = hf_processor(local_path, trust_remote_code=trust, use_fast=True)

    pool = "global_pool"
    role_worker_mapping = {Role.ActorRollout: ray.remote(SPINActorRolloutRefWorker)}
    mapping = {Role.ActorRollout: pool}
    if typed.reward_model.enable:
        from verl.workers.fsdp_workers import RewardModelWorker

        role_worker_mapping[Role.RewardModel] = ray.remote(RewardModelWorker)
        mapping[Role.RewardModel] = pool
    trainer_cfg = typed.trainer
    resource_pool_manager = ResourcePoolManager(
        resource_pool_spec={pool: [trainer_cfg.n_gpus_per_node] * trainer_cfg.nnodes},
        mapping=mapping,
        use_gpu=trainer_cfg.device != "cpu",
    )
    reward_kwargs = typed.reward_model.reward_kwargs
    train_dataset = create_rl_dataset(typed.data.train_files, typed.data, tokenizer, processor)
    return RaySPINTrainer(
        config=config,
        tokenizer=tokenizer,
        processor=processor,
        role_worker_mapping=role_worker_mapping,
        resource_pool_manager=resource_pool_manager,
        ray_worker_group_cls=ray_worker_group_cls or RayWorkerGroup,
        reward_fn=load_reward_manager(typed, tokenizer, num_examine=0, **reward_kwargs),
        val_reward_fn=load_reward_manager(typed, tokenizer, num_examine=1, **reward_kwargs),
        train_dataset=train_dataset,
        val_dataset=create_rl_dataset(typed.data.val_files, typed.data, tokenizer, processor),
        collate_fn=collate_fn,
        train_sampler=create_rl_sampler(typed.data, train_dataset),
        device_name=trainer_cfg.device,
    )


@ray.remote(num_cpus=1)
class SpinTaskRunner:
    """Runs the SPIN controller inside the Ray cluster."""

    def run(self, config) -> None:
        logging.basicConfig(level=os.environ.get("VERL_LOGGING_LEVEL", "WARNING").upper())
        print(OmegaConf.to_yaml(config, resolve=True))
        OmegaConf.resolve(config)
        trainer = build_spin_trainer(config)
        trainer.init_workers()
        trainer.fit()


if __name__ == "__main__":
    main()
