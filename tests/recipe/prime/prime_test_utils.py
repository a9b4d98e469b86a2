"""Composing the PRIME config for tests, and a tiny PRIME command line."""

from __future__ import annotations

import os

import recipe.prime

CONFIG_DIR = os.path.join(os.path.dirname(recipe.prime.__file__), "config")


def compose_prime_config(overrides: list[str]):
    """The prime_trainer config with ``overrides``, composed as ``python -m recipe.prime.main_prime`` would."""
    from hydra import compose, initialize_config_dir

    with initialize_config_dir(config_dir=CONFIG_DIR, version_base=None):
        return compose(config_name="prime_trainer", overrides=overrides)


def prime_overrides(ws: dict, steps: int = 2, workers: int = 1) -> list[str]:
    """verl's PRIME keys scaled down: 2 prompts trained of 4 drawn (oversample 2), 2 responses each, tiny model."""
    return [
        f"data.train_files={ws['train']}",
        f"data.val_files={ws['val']}",
        "data.train_batch_size=2",
        "data.oversample_factor=2",
        "data.max_prompt_length=32",
        "data.max_response_length=8",
        f"actor_rollout_ref.model.path={ws['model']}",
        "actor_rollout_ref.actor.optim.lr=1e-3",
        "actor_rollout_ref.actor.ppo_mini_batch_size=2",
        "actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu=4",
        "actor_rollout_ref.rollout.name=hf",
        "actor_rollout_ref.rollout.tensor_model_parallel_size=1",
        "actor_rollout_ref.rollout.n=2",
        "actor_rollout_ref.rollout.log_prob_micro_batch_size_per_gpu=4",
        "reward_model.model.optim.lr=1e-2",
        f"custom_reward_function.path={ws['reward']}",
        "trainer.logger=['console']",
        "trainer.console_format=full",  # the e2e test reads every metric from the console line
        f"trainer.n_gpus_per_node={workers}",
        "trainer.nnodes=1",
        "trainer.device=cpu",
        f"trainer.total_training_steps={steps}",
        "trainer.test_freq=-1",
        "trainer.val_before_train=False",
        "trainer.run_report=False",
        f"trainer.default_local_dir={ws['root']}/ckpt",
        "ray_init.num_cpus=4",
    ]
