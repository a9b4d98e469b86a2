"""Keys of verl's config whose runtime is not in this project: kept at their places (a verl script that carries them
at their defaults composes and runs), refused before Ray when a value differs from the default.

The defaults come from the composed YAML (`_generated_ppo_trainer.yaml`), never from this file: the table says only
*which* keys and *what to do instead*. When a feature lands, its entry goes (the config-truth test then wants the
key read by a real run).
"""

from __future__ import annotations

import functools
import os
from collections.abc import Mapping

from verl.workers.config.errors import ConfigError

__all__ = ["UNSUPPORTED", "check_unsupported_keys", "unsupported_reason"]

_SHARES_ACTOR_MESH = (
    "the reference runs in the actor's workers on the actor's device mesh; set "
    "actor_rollout_ref.actor.fsdp_config.{name} instead"
)

# One table per part of the config (dotted key, or 'section.*' for every key below it -> why it cannot be honoured
# and what to do instead); UNSUPPORTED joins them.

# actor_rollout_ref.actor, .ref, engine and optimizer blocks, critic
_ROLE_KEYS: dict[str, str] = {
    "actor_rollout_ref.ref.fsdp_config.fsdp_size": _SHARES_ACTOR_MESH.format(name="fsdp_size"),
    "actor_rollout_ref.ref.fsdp_config.offload_policy": _SHARES_ACTOR_MESH.format(name="offload_policy"),
    "actor_rollout_ref.ref.fsdp_config.optimizer_offload": "the reference has no optimizer; leave it at its default",
}

# actor_rollout_ref.rollout, actor_rollout_ref.model (and critic.model), distillation
_ROLLOUT_MODEL_KEYS: dict[str, str] = {}

# reward, reward_model, custom_reward_function, sandbox_fusion
_REWARD_KEYS: dict[str, str] = {}

# trainer, data, algorithm, global_profiler and the roles' profiler blocks, skip, ray_kwargs, transfer_queue
_TRAINER_KEYS: dict[str, str] = {}

UNSUPPORTED: dict[str, str] = {**_ROLE_KEYS, **_ROLLOUT_MODEL_KEYS, **_REWARD_KEYS, **_TRAINER_KEYS}


def unsupported_reason(key: str) -> str | None:
    """The table's reason for ``key`` (an exact entry, or a ``section.*`` entry above it), or None."""
    if key in UNSUPPORTED:
        return UNSUPPORTED[key]
    for entry, reason in UNSUPPORTED.items():
        if entry.endswith(".*") and key.startswith(entry[:-1]):
            return reason
    return None


@functools.cache
def _defaults():
    """The typed defaults of the PPO config, as Hydra composes them (the generated flat file)."""
    from omegaconf import OmegaConf

    from verl.trainer.config import PPOConfig
    from verl.trainer.config.generated import generated_path

    path = generated_path("ppo_trainer")
    if not os.path.exists(path):  # pragma: no cover - the file ships with the package
        raise FileNotFoundError(f"{path}: regenerate it with python -m verl.trainer.config.generated")
    return PPOConfig.from_config(OmegaConf.load(path))


def _plain(value):
    if hasattr(value, "to_dict"):
        return value.to_dict()
    if isinstance(value, Mapping):
        return {k: _plain(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_plain(v) for v in value]
    return value


def _lookup(config, key: str):
    node = config
    for part in key.split("."):
        if isinstance(node, Mapping):
            if part not in node:
                return _MISSING
            node = node[part]
        elif hasattr(node, part):
            node = getattr(node, part)
        else:
            return _MISSING
    return node


_MISSING = object()


def check_unsupported_keys(config) -> list[str]:
    """One problem per table key whose value in ``config`` (a typed PPO config) differs from the default."""
    defaults = _defaults()
    problems = []
    for entry, reason in UNSUPPORTED.items():
        key = entry[:-2] if entry.endswith(".*") else entry
        value, default = _lookup(config, key), _lookup(defaults, key)
        if value is _MISSING or default is _MISSING:
            continue
        value, default = _plain(value), _plain(default)
        if value != default:
            problems.append(
                f"{key}={value!r}: not implemented here (default {default!r} is the only value honoured): {reason}"
            )
    return problems


def raise_unsupported(config) -> None:
    """:func:`check_unsupported_keys` as one ConfigError."""
    problems = check_unsupported_keys(config)
    if problems:
        raise ConfigError("; ".join(problems))
