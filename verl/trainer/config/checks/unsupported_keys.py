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

# reward, reward_model, custom_reward_function, sandbox_fusion: verl 0.9's engine settings of the served reward model
# (reward.reward_model.rollout.*) that the served replicas do not take. verl 0.7's places of the same keys
# (reward_model.rollout.*) are carried here first (verl/trainer/config/reward_spellings.py).
_SERVED = "reward.reward_model.rollout"
_SAMPLING_PER_REQUEST = (
    "a served judge samples as each chat-completions request from the reward function says (temperature, top_p, "
    "n, max_tokens); set them in the request"
)
_WHOLE_REPLICAS = (
    "each served replica is one whole model; more replicas come from more slots (reward_model.n_gpus_per_node x "
    "nnodes with enable_resource_pool=True, else the trainer's)"
)


def _also(key: str, reason: str) -> str:
    return f"{reason} (also spelled reward_model.rollout.{key})"


_REWARD_KEYS: dict[str, str] = {
    f"{_SERVED}.enforce_eager": _also("enforce_eager", "the served vLLM replica always runs eagerly (no CUDA graphs)"),
    f"{_SERVED}.cudagraph_capture_sizes": _also(
        "cudagraph_capture_sizes", "the served vLLM replica captures no CUDA graphs"
    ),
    f"{_SERVED}.free_cache_engine": _also(
        "free_cache_engine",
        "the served replicas have no sleep mode and stay loaded between steps; to keep them off the trainer's "
        "devices, set reward_model.enable_resource_pool=True",
    ),
    f"{_SERVED}.data_parallel_size": _also("data_parallel_size", _WHOLE_REPLICAS),
    f"{_SERVED}.expert_parallel_size": _also("expert_parallel_size", _WHOLE_REPLICAS),
    f"{_SERVED}.pipeline_model_parallel_size": _WHOLE_REPLICAS,
    f"{_SERVED}.max_num_batched_tokens": _also(
        "max_num_batched_tokens", "the served vLLM replica leaves the tokens per engine step to vLLM"
    ),
    f"{_SERVED}.max_model_len": _also(
        "max_model_len",
        "a served replica's length is reward_model.rollout.prompt_length + response_length; set those",
    ),
    f"{_SERVED}.max_num_seqs": _also(
        "max_num_seqs", "the served vLLM replica batches the requests waiting together, up to 16 sequences per step"
    ),
    f"{_SERVED}.load_format": _also("load_format", "a served replica loads reward_model.model.path's own weights"),
    f"{_SERVED}.layered_summon": "a served reward model receives no weight updates",
    f"{_SERVED}.scheduling_policy": "the served replicas take requests first come, first served",
    f"{_SERVED}.full_determinism": "deterministic serving is not implemented for the served replicas",
    f"{_SERVED}.seed": "the served vLLM replica keeps vLLM's own engine seed; " + _SAMPLING_PER_REQUEST,
    f"{_SERVED}.multi_stage_wake_up": "the served replicas have no sleep mode to wake up from",
    f"{_SERVED}.engine_kwargs": _also("engine_kwargs", "the served replica takes no extra engine arguments"),
    f"{_SERVED}.limit_images": _also("limit_images", "served reward models read text only"),
    f"{_SERVED}.enable_chunked_prefill": _also(
        "enable_chunked_prefill", "the served vLLM replica keeps vLLM's default (chunked prefill on)"
    ),
    f"{_SERVED}.enable_prefix_caching": _also(
        "enable_prefix_caching", "the served vLLM replica keeps vLLM's default (prefix caching on)"
    ),
    f"{_SERVED}.disable_log_stats": _also("disable_log_stats", "the served vLLM replica logs no engine statistics"),
    f"{_SERVED}.skip_tokenizer_init": _also(
        "skip_tokenizer_init", "a served replica tokenizes each chat with the reward model's own tokenizer"
    ),
    f"{_SERVED}.ignore_eos": _SAMPLING_PER_REQUEST,
    f"{_SERVED}.temperature": _SAMPLING_PER_REQUEST,
    f"{_SERVED}.top_k": _SAMPLING_PER_REQUEST,
    f"{_SERVED}.top_p": _SAMPLING_PER_REQUEST,
    f"{_SERVED}.do_sample": _SAMPLING_PER_REQUEST,
    f"{_SERVED}.n": _SAMPLING_PER_REQUEST,
    f"{_SERVED}.quantization": "quantized serving is not implemented; serve the unquantized model",
    f"{_SERVED}.quantization_config_file": "quantized serving is not implemented; serve the unquantized model",
    f"{_SERVED}.mtp": "speculative decoding is not implemented in the served replicas",
    f"{_SERVED}.disaggregation": "prefill/decode disaggregation (verl: SGLang only) is not implemented",
}

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
