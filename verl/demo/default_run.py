"""The built-in demo run: what ``python -m verl.trainer.main_ppo`` trains when it is given no data and no model.

``ppo_trainer.yaml`` holds verl v0.4.1's defaults, so a verl command line means the same run here as in verl. Those
defaults describe a 7B model on 8 GPUs with vLLM; they cannot train the shipped 1M-parameter model on the shipped
arithmetic task in minutes on a CPU. So when a run names neither data files nor a model, ``main_ppo`` switches to
the built-in demo: the shipped task and model, and the values below, tuned for them (docs/default_run.md). Each
value applies only where the key is still at its YAML default (the command line and a ``--config-name`` file win),
and the run prints what it chose. A run on the user's own data or model gets verl's defaults, untouched.
"""

from __future__ import annotations

import os
from collections.abc import Iterable

from omegaconf import DictConfig, ListConfig, OmegaConf, open_dict

from verl.trainer.config.migration import set_on_command_line

__all__ = ["DEMO_VALUES", "TRIGGER_KEYS", "apply_builtin_demo", "command_line_keys", "describe_choices"]

# Keys whose presence on the command line (or change in the config file) means "my own run": the demo stays off.
TRIGGER_KEYS = ("data.train_files", "data.val_files", "actor_rollout_ref.model.path", "critic.model.path")

# The demo's values, each against verl's default in ppo_trainer.yaml (the why is in docs/default_run.md).
DEMO_VALUES: dict[str, object] = {
    "data.train_files": "builtin://arithmetic/train.parquet",  # ~/data/rlhf/gsm8k/train.parquet
    "data.val_files": "builtin://arithmetic/test.parquet",  # ~/data/rlhf/gsm8k/test.parquet
    "actor_rollout_ref.model.path": "builtin://default_model",  # ~/models/deepseek-llm-7b-chat
    "critic.model.path": "builtin://default_model",  # same; only read when adv_estimator=gae
    "algorithm.adv_estimator": "grpo",  # gae: GRPO needs no critic, and the task has a verifiable answer
    "actor_rollout_ref.rollout.name": "hf",  # ??? (required): runs wherever torch runs, no extra install
    "actor_rollout_ref.rollout.n": 8,  # 1: GRPO compares 8 answers per prompt
    "actor_rollout_ref.rollout.tensor_model_parallel_size": 1,  # 2: a 1M model needs no tensor parallelism
    "data.train_batch_size": 32,  # 1024
    "actor_rollout_ref.actor.ppo_mini_batch_size": 32,  # 256: one update per step
    "actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu": 64,  # null: verl requires a micro batch to be set
    "actor_rollout_ref.rollout.log_prob_micro_batch_size_per_gpu": 64,  # null
    "actor_rollout_ref.ref.log_prob_micro_batch_size_per_gpu": 64,  # null
    "critic.ppo_micro_batch_size_per_gpu": 64,  # null
    "data.max_prompt_length": 32,  # 512: the task's prompts are about 20 tokens
    "data.max_response_length": 8,  # 512: an answer is at most 3 digits and EOS
    "actor_rollout_ref.actor.optim.lr": 1e-4,  # 1e-6: a 1M model moves at a larger rate
    "trainer.n_gpus_per_node": 2,  # 8: two worker processes fit a 2-core box
    "trainer.device": "auto",  # cuda: CUDA when present, else CPU
    "trainer.logger": ["console"],  # ['console', 'wandb']: no account or network needed
    "trainer.total_training_steps": 60,  # null (30 epochs): the curve is flat after about 60 steps
    "trainer.test_freq": 5,  # -1: the learning curve needs validation points
    "trainer.experiment_name": "arithmetic",  # gsm8k
}


def command_line_keys(overrides: Iterable[str]) -> set[str]:
    """Keys set by Hydra command-line overrides (``a.b=1``, ``+a.b=1``, ``++a.b=1``, ``~a.b``)."""
    keys = set()
    for override in overrides:
        key = override.split("=", 1)[0].lstrip("+~").strip()
        if key:
            keys.add(key)
    return keys


def _plain(value):
    return OmegaConf.to_container(value) if isinstance(value, DictConfig | ListConfig) else value


def _yaml_value(defaults, key: str):
    return _plain(OmegaConf.select(defaults, key, default=None))


_VERL_ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
# the composed defaults in one file (verl/trainer/config/generated.py keeps it equal to what Hydra composes)
_PPO_YAML = os.path.join(_VERL_ROOT, "trainer", "config", "_generated_ppo_trainer.yaml")


def _yaml_defaults():
    return OmegaConf.load(_PPO_YAML)


def _chosen_by_user(config, defaults, key: str, set_keys: set[str]) -> bool:
    """The command line sets ``key`` (or a section above it), or a ``--config-name`` file changed it."""
    return set_on_command_line(key, set_keys) or _plain(OmegaConf.select(config, key)) != _yaml_value(defaults, key)


def _user_has_verl_defaults(defaults) -> bool:
    """verl's default data and model exist on this machine: ``main_ppo`` with no arguments means verl's run."""
    paths = [_yaml_value(defaults, k) for k in ("data.train_files", "actor_rollout_ref.model.path")]
    return all(isinstance(p, str) and os.path.exists(os.path.expanduser(p)) for p in paths)


def apply_builtin_demo(config, set_keys: Iterable[str], defaults=None, values=None) -> dict[str, object]:
    """Switch ``config`` to the built-in demo when it names no data and no model; return the values chosen.

    ``set_keys`` are the keys the command line sets (:func:`command_line_keys`); ``defaults`` is the YAML the run
    was composed from (default: ``ppo_trainer.yaml``); ``values``: a recipe's demo values (default
    ``DEMO_VALUES``). Returns an empty dict, and leaves ``config`` alone, for a run on the user's own data or model.
    """
    set_keys = set(set_keys)
    defaults = _yaml_defaults() if defaults is None else defaults
    for key in TRIGGER_KEYS:
        if _chosen_by_user(config, defaults, key, set_keys):
            return {}
    if _user_has_verl_defaults(defaults):
        return {}
    chosen = {}
    with open_dict(config):
        for key, value in (DEMO_VALUES if values is None else values).items():
            if _chosen_by_user(config, defaults, key, set_keys):
                continue
            OmegaConf.update(config, key, value, merge=False)
            chosen[key] = value
    return chosen


def describe_choices(chosen: dict[str, object]) -> str:
    """The lines ``main_ppo`` prints when the demo applies."""
    lines = [
        "No data files or model were given: running the built-in demo (GRPO on the shipped arithmetic task and "
        "model, docs/default_run.md). It chose these values; set any of them on the command line to change it, "
        "or set data.train_files, data.val_files and actor_rollout_ref.model.path for verl's defaults:"
    ]
    lines += [f"  {key}={value}" for key, value in chosen.items()]
    return "\n".join(lines)
