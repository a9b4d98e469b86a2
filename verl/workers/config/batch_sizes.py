"""Per-worker batch sizes derived from the global ones in the config (verl's worker-side normalization).

Configs give `ppo_mini_batch_size` in prompts over the whole job and the deprecated
`*_micro_batch_size` keys over all data-parallel ranks. Each worker needs samples per rank:

* mini batch per rank = `ppo_mini_batch_size * rollout.n // dp`, with `dp = world_size // ulysses_sp` (Megatron:
  `world_size // (tensor x pipeline x context parallel)`, the ranks that share one copy of the model);
* a deprecated global micro batch is divided by `dp` and becomes the `*_per_gpu` value;
* gradient accumulation = mini batch per rank // micro batch per rank.

The functions here are pure (they return the numbers); `apply_to(config)` writes them back the way
verl's workers do, so code that reads `config.actor.ppo_mini_batch_size` after init sees per-rank values.
Both the driver (to fail before Ray starts) and the workers call them.
"""

from __future__ import annotations

from dataclasses import dataclass

from omegaconf import DictConfig, open_dict

from verl.workers.config.errors import ConfigError

__all__ = [
    "data_parallel_size",
    "ActorBatchSizes",
    "CriticBatchSizes",
    "normalize_actor_batch_sizes",
    "normalize_critic_batch_sizes",
    "normalize_reward_model_micro_batch_size",
]


def _get(section, key: str, default=None):
    """`section.key` for DictConfig or dict sections, `default` when the key is absent."""
    if section is None:
        return default
    if hasattr(section, "get"):
        return section.get(key, default)
    return getattr(section, key, default)


def _set(section, key: str, value) -> None:
    """``section.key = value`` for typed sections, and for DictConfig sections in struct mode."""
    if isinstance(section, DictConfig):
        with open_dict(section):
            section[key] = value
    else:
        setattr(section, key, value)


def data_parallel_size(world_size: int, sp_size: int, sp_key: str = "ulysses_sequence_parallel_size") -> int:
    """Number of data-parallel groups: world_size // sp_size (sp_size must divide world_size)."""
    if not isinstance(sp_size, int) or sp_size < 1:
        raise ConfigError(f"{sp_key}={sp_size!r} must be a positive integer")
    if world_size % sp_size != 0:
        raise ConfigError(
            f"{sp_key}={sp_size} must divide the number of workers (trainer.n_gpus_per_node * trainer.nnodes"
            f" = {world_size})"
        )
    return world_size // sp_size


def _parallel_dp(section, prefix: str, world_size: int) -> int:
    """Data-parallel size of a role: the world over its Ulysses group, or with `strategy=megatron` over the ranks
    that run the same rows (`megatron.tensor_model_parallel_size * pipeline_... * context_...`, and
    `expert_model_parallel_size`: the Megatron engine's expert-parallel peers share their rows)."""
    if _get(section, "strategy") != "megatron":
        key = f"{prefix}.ulysses_sequence_parallel_size"
        return data_parallel_size(world_size, _get(section, "ulysses_sequence_parallel_size", 1), key)
    megatron = _get(section, "megatron")
    kinds = ("tensor_model", "pipeline_model", "context", "expert_model")
    sizes = [_get(megatron, f"{k}_parallel_size", 1) or 1 for k in kinds]
    key = (
        f"{prefix}.megatron.tensor_model_parallel_size * pipeline_model_parallel_size * context_parallel_size * "
        "expert_model_parallel_size"
    )
    if not all(isinstance(v, int) and v >= 1 for v in sizes):
        raise ConfigError(f"{key} = {sizes}: each must be a positive integer")
    return data_parallel_size(world_size, sizes[0] * sizes[1] * sizes[2] * sizes[3], key)


def _per_rank_micro(global_key: str, global_value, per_gpu_value, dp: int):
    """Per-rank micro batch size from the deprecated global value (divided by dp) or the per-GPU value."""
    if global_value is None:
        return per_gpu_value
    if global_value // dp < 1:
        raise ConfigError(
            f"{global_key}={global_value} is smaller than the data-parallel size {dp}; it is divided by dp, so each"
            " rank would get 0 samples (use the *_per_gpu key instead)"
        )
    return global_value // dp


def _check_micro_divides_mini(prefix: str, mini_per_rank: int, micro_per_rank: int | None) -> int | None:
    if micro_per_rank is None:
        return None
    if not isinstance(micro_per_rank, int) or micro_per_rank < 1:
        raise ConfigError(f"{prefix}.ppo_micro_batch_size_per_gpu={micro_per_rank!r} must be a positive integer")
    if mini_per_rank % micro_per_rank != 0:
        raise ConfigError(
            f"{prefix}.ppo_micro_batch_size_per_gpu={micro_per_rank} must divide the per-rank mini batch"
            f" ({prefix}.ppo_mini_batch_size * rollout.n // dp = {mini_per_rank})"
        )
    return mini_per_rank // micro_per_rank


def _mini_per_rank(prefix: str, mini: int, n: int, dp: int) -> int:
    if not isinstance(mini, int) or mini < 1:
        raise ConfigError(f"{prefix}.ppo_mini_batch_size={mini!r} must be a positive integer")
    per_rank = mini * n // dp
    if per_rank < 1:
        raise ConfigError(
            f"{prefix}.ppo_mini_batch_size={mini} with rollout.n={n} gives {mini * n} samples per mini batch,"
            f" fewer than the data-parallel size {dp}; expected ppo_mini_batch_size * n >= {dp}"
        )
    return per_rank


@dataclass(frozen=True)
class ActorBatchSizes:
    """Per-rank sizes of the actor/rollout/ref worker (samples, not prompts)."""

    dp_size: int
    ppo_mini_batch_size: int
    ppo_micro_batch_size_per_gpu: int | None
    gradient_accumulation: int | None
    rollout_log_prob_micro_batch_size_per_gpu: int | None
    ref_log_prob_micro_batch_size_per_gpu: int | None

    def apply_to(self, config) -> None:
        """Write the per-rank values into an `actor_rollout_ref` config section, as verl's worker does."""
        _set(config.actor, "ppo_mini_batch_size", self.ppo_mini_batch_size)
        if _get(config.actor, "ppo_micro_batch_size") is not None:
            _set(config.actor, "ppo_micro_batch_size", self.ppo_micro_batch_size_per_gpu)
        _set(config.actor, "ppo_micro_batch_size_per_gpu", self.ppo_micro_batch_size_per_gpu)
        if _get(config.rollout, "log_prob_micro_batch_size") is not None:
            _set(config.rollout, "log_prob_micro_batch_size", self.rollout_log_prob_micro_batch_size_per_gpu)
        _set(config.rollout, "log_prob_micro_batch_size_per_gpu", self.rollout_log_prob_micro_batch_size_per_gpu)
        if _get(config, "ref") is not None:
            if _get(config.ref, "log_prob_micro_batch_size") is not None:
                _set(config.ref, "log_prob_micro_batch_size", self.ref_log_prob_micro_batch_size_per_gpu)
            _set(config.ref, "log_prob_micro_batch_size_per_gpu", self.ref_log_prob_micro_batch_size_per_gpu)


def normalize_actor_batch_sizes(config, world_size: int) -> ActorBatchSizes:
    """Per-rank batch sizes for an `actor_rollout_ref` config section on `world_size` workers.

    Raises ConfigError when a size would be 0 or a micro batch does not divide the mini batch.
    """
    actor, rollout, ref = config.actor, config.rollout, _get(config, "ref")
    prefix = "actor_rollout_ref.actor"
    dp = _parallel_dp(actor, prefix, world_size)
    n = _get(rollout, "n", 1)
    mini = _mini_per_rank(prefix, _get(actor, "ppo_mini_batch_size"), n, dp)
    micro = _per_rank_micro(
        f"{prefix}.ppo_micro_batch_size",
        _get(actor, "ppo_micro_batch_size"),
        _get(actor, "ppo_micro_batch_size_per_gpu"),
        dp,
    )
    grad_accum = None if _get(actor, "use_dynamic_bsz", False) else _check_micro_divides_mini(prefix, mini, micro)
    rollout_micro = _per_rank_micro(
        "actor_rollout_ref.rollout.log_prob_micro_batch_size",
        _get(rollout, "log_prob_micro_batch_size"),
        _get(rollout, "log_prob_micro_batch_size_per_gpu"),
        dp,
    )
    ref_micro = _per_rank_micro(
        "actor_rollout_ref.ref.log_prob_micro_batch_size",
        _get(ref, "log_prob_micro_batch_size"),
        _get(ref, "log_prob_micro_batch_size_per_gpu"),
        dp,
    )
    return ActorBatchSizes(dp, mini, micro, grad_accum, rollout_micro, ref_micro)


@dataclass(frozen=True)
class CriticBatchSizes:
    """Per-rank sizes of the critic worker (samples)."""

    dp_size: int
    ppo_mini_batch_size: int
    ppo_micro_batch_size_per_gpu: int | None
    forward_micro_batch_size_per_gpu: int | None
    gradient_accumulation: int | None

    def apply_to(self, config) -> None:
        """Write the per-rank values into a `critic` config section, as verl's worker does."""
        _set(config, "ppo_mini_batch_size", self.ppo_mini_batch_size)
        if _get(config, "ppo_micro_batch_size") is not None:
            _set(config, "ppo_micro_batch_size", self.ppo_micro_batch_size_per_gpu)
        _set(config, "ppo_micro_batch_size_per_gpu", self.ppo_micro_batch_size_per_gpu)
        if _get(config, "forward_micro_batch_size") is not None:
            _set(config, "forward_micro_batch_size", self.forward_micro_batch_size_per_gpu)
        _set(config, "forward_micro_batch_size_per_gpu", self.forward_micro_batch_size_per_gpu)


def normalize_critic_batch_sizes(config, world_size: int) -> CriticBatchSizes:
    """Per-rank batch sizes for a `critic` config section on `world_size` workers."""
    prefix = "critic"
    dp = _parallel_dp(config, prefix, world_size)
    mini = _mini_per_rank(prefix, _get(config, "ppo_mini_batch_size"), _get(config, "rollout_n", 1), dp)
    micro = _per_rank_micro(
        f"{prefix}.ppo_micro_batch_size",
        _get(config, "ppo_micro_batch_size"),
        _get(config, "ppo_micro_batch_size_per_gpu"),
        dp,
    )
    forward_micro = _per_rank_micro(
        f"{prefix}.forward_micro_batch_size",
        _get(config, "forward_micro_batch_size"),
        _get(config, "forward_micro_batch_size_per_gpu"),
        dp,
    )
    grad_accum = None if _get(config, "use_dynamic_bsz", False) else _check_micro_divides_mini(prefix, mini, micro)
    return CriticBatchSizes(dp, mini, micro, forward_micro, grad_accum)


def normalize_reward_model_micro_batch_size(config, world_size: int) -> int | None:
    """Per-rank micro batch of a `reward_model` section: the deprecated global value // world_size, or per-GPU."""
    return _per_rank_micro(
        "reward_model.micro_batch_size",
        _get(config, "micro_batch_size"),
        _get(config, "micro_batch_size_per_gpu"),
        world_size,
    )
