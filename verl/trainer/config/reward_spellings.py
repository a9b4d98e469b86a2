"""The reward's keys spelled several ways, resolved once into the one key the runtime reads.

verl moved its reward keys twice: verl 0.7 added the served reward model's keys under `reward_model`
(`reward_model.rollout.*`, `reward_model.reward_loop_*`), and verl 0.9 moved everything under `reward:`, keeping
the older places as aliases with null defaults. Here the older places are where the runtime reads (verl v0.4's
`reward_model.*` and `custom_reward_function.*`, with their defaults), so a verl v0.4.1 script means what it meant;
every other spelling of a key is carried to that key when the typed config is built (`PPOConfig.from_config`):

* a key counts as *set* in a place when it differs from that place's default (for the null-default aliases: when it
  is not null);
* set in one place only, its value goes to the key the runtime reads (its ``home``); set in several places to the
  same value, that value; to different values, the config is refused naming every place;
* afterwards verl 0.9's ``reward.*`` twins of a v0.4 key read the run's value too, so code written against verl 0.9's
  layout reads what runs.

Keys that only verl 0.9 has (the reward manager's ``source`` and ``module``, the served engine's other settings) are
their own home: verl 0.7's ``reward_model.reward_loop_*`` and ``reward_model.rollout.*`` spellings are carried there.

One rule is verl's meaning rather than a spelling: from verl 0.7 on the reward loop is on by default, so a reward
model that names its serving engine (``reward_model.enable=True`` with ``reward_model.rollout.name`` set) is served
by it; here that turns ``reward_model.use_reward_loop`` on (without ``rollout.name``, verl v0.4's reward-model
worker runs, as before).
"""

from __future__ import annotations

import functools
from collections.abc import Iterable
from dataclasses import dataclass

from verl.utils.config import reads_paused
from verl.workers.config.errors import ConfigError

__all__ = ["SPELLINGS", "Spelling", "resolve_reward_spellings", "spellings_of"]


@dataclass(frozen=True)
class Spelling:
    """``key`` is another spelling of ``home``, the key the runtime reads. ``source``: whose spelling it is.
    ``mirror``: after resolution ``key`` holds the run's value too (verl 0.9's ``reward.*`` twins)."""

    key: str
    home: str
    source: str
    mirror: bool = False


_V09, _V07 = "verl 0.9", "verl 0.7"
# reward_model.rollout's own keys (this project's since verl 0.6's reward loop), also under reward.reward_model
_SERVED_ENGINE_KEYS = (
    "name",
    "dtype",
    "gpu_memory_utilization",
    "tensor_model_parallel_size",
    "prompt_length",
    "response_length",
)
# verl 0.9's engine keys whose verl 0.7 places are reward_model.rollout.* (null there: not set)
_V07_ENGINE_KEYS = (
    "enforce_eager",
    "cudagraph_capture_sizes",
    "free_cache_engine",
    "data_parallel_size",
    "expert_parallel_size",
    "max_num_batched_tokens",
    "max_model_len",
    "max_num_seqs",
    "load_format",
    "engine_kwargs",
    "limit_images",
    "enable_chunked_prefill",
    "enable_prefix_caching",
    "disable_log_stats",
    "skip_tokenizer_init",
)
_SANDBOX_KEYS = ("url", "max_concurrent", "memory_limit_mb")


def _v09(key: str, home: str) -> Spelling:
    return Spelling(key, home, _V09, mirror=True)


SPELLINGS: tuple[Spelling, ...] = (
    _v09("reward.num_workers", "reward_model.num_workers"),
    _v09("reward.custom_reward_function.path", "custom_reward_function.path"),
    _v09("reward.custom_reward_function.name", "custom_reward_function.name"),
    _v09("reward.reward_manager.name", "reward_model.reward_manager"),
    _v09("reward.reward_model.enable", "reward_model.enable"),
    _v09("reward.reward_model.enable_resource_pool", "reward_model.enable_resource_pool"),
    _v09("reward.reward_model.n_gpus_per_node", "reward_model.n_gpus_per_node"),
    _v09("reward.reward_model.nnodes", "reward_model.nnodes"),
    _v09("reward.reward_model.model_path", "reward_model.model.path"),
    *(_v09(f"reward.reward_model.rollout.{k}", f"reward_model.rollout.{k}") for k in _SERVED_ENGINE_KEYS),
    *(_v09(f"reward.sandbox_fusion.{k}", f"reward_model.sandbox_fusion.{k}") for k in _SANDBOX_KEYS),
    # verl 0.9's legacy top-level sandbox block
    *(Spelling(f"sandbox_fusion.{k}", f"reward_model.sandbox_fusion.{k}", _V09 + " (legacy)") for k in _SANDBOX_KEYS),
    Spelling("reward_model.sandbox_fusion_url", "reward_model.sandbox_fusion.url", "verl's sandbox example scripts"),
    Spelling("reward_model.reward_loop_source", "reward.reward_manager.source", _V07),
    Spelling("reward_model.reward_loop_module_path", "reward.reward_manager.module.path", _V07),
    # verl 0.7 loads the class of this name from reward_loop_module_path: the manager's name here
    Spelling("reward_model.reward_loop_class_name", "reward_model.reward_manager", _V07),
    *(Spelling(f"reward_model.rollout.{k}", f"reward.reward_model.rollout.{k}", _V07) for k in _V07_ENGINE_KEYS),
)


def spellings_of(home: str) -> list[str]:
    """Every other spelling of ``home`` (a key the runtime reads)."""
    return [s.key for s in SPELLINGS if s.home == home]


def _get(node, key: str):
    for part in key.split("."):
        node = getattr(node, part)
    return node


def _set(node, key: str, value) -> None:
    parent, _, leaf = key.rpartition(".")
    setattr(_get(node, parent) if parent else node, leaf, value)


def _distinct(values: Iterable) -> list:
    out: list = []
    for value in values:
        if all(value != seen for seen in out):
            out.append(value)
    return out


@functools.cache
def _defaults():
    from verl.trainer.config import PPOConfig

    return PPOConfig()  # the dataclasses' defaults are the YAML's (a test holds them equal)


def resolve_reward_spellings(config) -> None:
    """Carry every set spelling of the reward's keys to its home in ``config`` (a typed PPOConfig, changed in place);
    ConfigError naming the places where a key is set to different values."""
    defaults = _defaults()
    homes: dict[str, list[Spelling]] = {}
    for spelling in SPELLINGS:
        homes.setdefault(spelling.home, []).append(spelling)
    problems = []
    with reads_paused():  # resolving is not the runtime reading the keys
        for home, spellings in homes.items():
            written = [
                (key, _get(config, key))
                for key in (home, *(s.key for s in spellings))
                if _get(config, key) != _get(defaults, key)
            ]
            values = _distinct(value for _, value in written)
            if len(values) > 1:
                places = ", ".join(f"{key}={value!r}" for key, value in written)
                problems.append(
                    f"{places}: these are spellings of one key ({home}, which the run reads), set to different "
                    "values; set one of them"
                )
            elif values:
                _set(config, home, values[0])
        if problems:
            raise ConfigError("; ".join(problems))
        for spelling in SPELLINGS:
            if spelling.mirror:
                _set(config, spelling.key, _get(config, spelling.home))
        rm = config.reward_model
        if rm.enable and rm.rollout.name is not None:
            rm.use_reward_loop = True
