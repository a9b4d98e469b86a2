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
_TORCH_ONLY = "only torch.profiler runs here (tool null or torch; docs/performance.md); leave this at its default"
_PROFILER_TOOL_KEYS = {
    "tool_config.npu.*": "the Ascend NPU profiler is not run here: " + _TORCH_ONLY,
    "tool_config.nsys.*": "no Nsight Systems session is started here: " + _TORCH_ONLY,
    "tool_config.torch_memory.*": "no CUDA memory snapshots are taken here: " + _TORCH_ONLY,
    "tool_config.precision_debugger.*": "msprobe's precision debugger is not run here: " + _TORCH_ONLY,
    "tool_config.torch.schedule.*": "a profiled step is recorded whole (no torch.profiler schedule over the update's "
    "mini-batches); pick the steps with trainer.profile_steps and leave the schedule at its default",
    "tool_config.torch.profile_token_start": "recording from a response-token index needs verl's rollout-server "
    "profiling, which is not here; the rollout is recorded whole",
    "tool_config.torch.profile_token_end": "recording up to a response-token index needs verl's rollout-server "
    "profiling, which is not here; the rollout is recorded whole",
}
_ASYNC_TRAINERS = (
    "verl 0.9's asynchronous v1 trainer modes are not here (trainer.v1.trainer_mode=sync is this project's trainer); "
    "the one-step-off-policy and fully async recipes are (docs/one_step_off_policy.md, docs/fully_async.md)"
)
_NO_SKIP = "rollout dumping and reuse (verl's skip) is not implemented here; every step generates its rollout"
_TRAINER_KEYS: dict[str, str] = {
    **{
        f"{section}.profiler.{key}": reason
        for section in (
            "actor_rollout_ref.actor",
            "actor_rollout_ref.ref",
            "actor_rollout_ref.rollout",
            "critic",
            "reward_model",
        )
        for key, reason in _PROFILER_TOOL_KEYS.items()
    },
    "global_profiler.global_tool_config.*": "nsys, torch_memory and precision_debugger are not run here: "
    + _TORCH_ONLY,
    "trainer.v1.trainer_mode": _ASYNC_TRAINERS,
    "trainer.v1.sync": "the synchronous mode has no options; leave it {}",
    "trainer.v1.colocate_async": _ASYNC_TRAINERS,
    "trainer.v1.separate_async.*": _ASYNC_TRAINERS,
    "trainer.v1.sampler.*": "verl 0.9's replay buffer (the sampler of its asynchronous modes) is not here: "
    + _ASYNC_TRAINERS,
    "skip.rollout.*": _NO_SKIP,
    "skip.rollout_tq.*": _NO_SKIP + " (verl's TransferQueue trainer is not here either)",
    "skip.async_rollout.*": _NO_SKIP + " (recipe.fully_async_policy has no rollout dump either)",
    "transfer_queue.*": "verl's TransferQueue is not here: the trainer hands batches to its workers directly "
    "(DataProto over Ray); leave it disabled",
    "data.audio_key": "audio inputs are not supported here (image and video are: data.image_key, data.video_key)",
    "data.image_patch_size": "images are resized by the model's processor here (its own patch size); set the "
    "processor's options with data.mm_processor_kwargs instead",
    "data.return_multi_modal_inputs": "the training forward takes the processor outputs the dataset computes; no "
    "rollout here computes them again",
    "data.function_tool_path": "@function_tool modules are not supported here; declare tools in a tool config file "
    "(actor_rollout_ref.rollout.multi_turn.tool_config_path)",
    "algorithm.filter_groups.max_inflight_gen_batches": "the DAPO trainer here generates one batch at a time; "
    "leave it 1",
}

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
