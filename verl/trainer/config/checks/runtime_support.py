"""Settings the PPO workers cannot honour yet, refused before Ray starts instead of failing (or being ignored) later.

Each entry names the key, the value and what to use instead. When a feature lands, its entry goes.
"""

from __future__ import annotations

import os
import shutil

from verl.trainer.config import ConfigError
from verl.workers.config.model import check_gradient_checkpointing_policy

__all__ = ["check_fused_head_model", "check_runtime_support"]


def check_runtime_support(config, use_critic: bool, use_ref: bool, use_rm: bool = False) -> None:
    """Raise ConfigError for the first setting the runtime would not honour (``config``: the typed PPO config)."""
    arr = config.actor_rollout_ref
    actor_sp = arr.actor.ulysses_sequence_parallel_size
    if use_ref and arr.ref.ulysses_sequence_parallel_size != actor_sp:
        # the actor/ref worker builds one ("dp", "sp") mesh from the actor's value
        raise ConfigError(
            f"actor_rollout_ref.ref.ulysses_sequence_parallel_size={arr.ref.ulysses_sequence_parallel_size} differs "
            f"from actor_rollout_ref.actor.ulysses_sequence_parallel_size={actor_sp}: the reference shares the "
            "actor's workers and sequence-parallel mesh; leave ref's at its default (the actor's value)"
        )
    rollout = arr.rollout
    if rollout.name == "vllm" and rollout.free_cache_engine and not rollout.enforce_eager:
        # sleep mode (GPU) and the CPU release both drop what a captured/compiled graph points at
        raise ConfigError(
            "actor_rollout_ref.rollout.enforce_eager=False with free_cache_engine=True: the engine's weights and KV "
            "cache are released between generations, which graphs captured over them cannot survive; set "
            "enforce_eager=True, or free_cache_engine=False to keep the engine's memory"
        )
    if use_rm and config.reward_model.ulysses_sequence_parallel_size > 1:
        raise ConfigError(
            f"reward_model.ulysses_sequence_parallel_size={config.reward_model.ulysses_sequence_parallel_size}: "
            "sequence parallelism is not implemented in the reward-model worker (actor, ref and critic have it); "
            "use 1"
        )
    models = [("actor_rollout_ref.model", arr.model, arr.actor.strategy)]
    models += [("critic.model", config.critic.model, config.critic.strategy)] if use_critic else []
    for key, model, strategy in models:
        _check_checkpointing_policy(key, model, strategy)
        if model.enable_activation_offload:
            raise ConfigError(
                f"{key}.enable_activation_offload=True is not implemented in the PPO workers; set it False "
                "(enable_gradient_checkpointing=True saves activation memory)"
            )
    model = arr.model
    if model.use_liger:
        _check_liger(config)
    backend = model.fused_kernel_options.impl_backend
    if (model.use_fused_kernels or arr.actor.use_fused_kernels) and backend != "torch":
        raise ConfigError(
            f"actor_rollout_ref.model.fused_kernel_options.impl_backend={backend!r}: only the 'torch' backend of "
            "the fused log-prob head is built (it runs on CPU and GPU); set impl_backend=torch"
        )
    _check_unimplemented_switches(config)
    _check_fsdp1_only_keys(config, use_critic, use_ref, use_rm)
    actor = arr.actor
    if actor.use_torch_compile and not actor.entropy_from_logits_with_chunking and not _cxx_compiler():
        raise ConfigError(
            "actor_rollout_ref.actor.use_torch_compile=True compiles the entropy with torch.compile, which needs a "
            "C++ compiler (g++, c++ or clang++ on PATH, or $CXX) and none was found; install one or set "
            "actor_rollout_ref.actor.use_torch_compile=False"
        )


def _check_liger(config) -> None:
    """``actor_rollout_ref.model.use_liger=True``: the FSDP engine patches the actor's and reference's model with
    Liger's kernels where they can run (a GPU, the package importable); elsewhere the key is refused, since turning it
    off changes only speed and memory."""
    from verl.models.transformers.liger import liger_unavailable_reason
    from verl.trainer.config.checks.ppo import resolve_device_name

    key = "actor_rollout_ref.model.use_liger=True"
    if config.actor_rollout_ref.actor.strategy == "megatron":  # refused by checks.megatron
        return
    try:
        device = resolve_device_name(config.trainer.device)
    except ConfigError:  # an unknown trainer.device is reported by the device check
        return
    reason = liger_unavailable_reason(device)
    if reason is not None:
        raise ConfigError(
            f"{key} with trainer.device={device}: {reason}. The kernels only make the same computation faster and "
            "lighter on memory; set actor_rollout_ref.model.use_liger=False to train without them"
        )


def _check_unimplemented_switches(config) -> None:
    """Keys verl accepts that nothing here reads: a non-default value is refused rather than silently ignored."""
    arr = config.actor_rollout_ref
    if config.data.tokenizer is not None:
        raise ConfigError(
            f"data.tokenizer={config.data.tokenizer!r} is not read: the tokenizer is loaded from "
            "actor_rollout_ref.model.path (or model.tokenizer_path); leave data.tokenizer=null"
        )
    if config.data.return_raw_input_ids:
        raise ConfigError(
            "data.return_raw_input_ids=True is not implemented (the reward model re-tokenizes the decoded text with "
            "reward_model.model.input_tokenizer); set it False"
        )
    if arr.rollout.use_fire_sampling:
        raise ConfigError(
            "actor_rollout_ref.rollout.use_fire_sampling=True (FIRE sampling) is not implemented by the HF or vLLM "
            "rollout; set it False"
        )
    if arr.rollout.multi_stage_wake_up:
        raise ConfigError(
            "actor_rollout_ref.rollout.multi_stage_wake_up=True (SGLang's staged weight/KV-cache wake-up) is not "
            "implemented; set it False"
        )
    for name in ("chat_template_func", "filter_prompts"):
        if name in config.data.extra:
            raise ConfigError(
                f"data.{name}={config.data.extra[name]!r}: verl reads this key but nothing uses it (here neither); "
                "remove it"
            )
    for name in type(arr.ref).DERIVED_KEYS:  # the actor's are its own keys (verl 0.9); the ref's follow the model
        value, model_value = getattr(arr.ref, name), getattr(arr.model, name)
        if value and not model_value:  # the default (False) cannot be told from a value the user set
            raise ConfigError(
                f"actor_rollout_ref.ref.{name}={value!r}: the worker sets it from actor_rollout_ref.model."
                f"{name} (={model_value!r}); set actor_rollout_ref.model.{name} instead"
            )
    _check_nsight_options(config.trainer)
    for key, section in (("actor_rollout_ref.actor", arr.actor), ("critic", config.critic)):
        if section.shuffle:
            raise ConfigError(
                f"{key}.shuffle=True is not implemented: mini-batches are taken in the batch's order (as in verl, "
                "where the key is unused too); set it False (data.shuffle shuffles the prompts)"
            )


def _check_nsight_options(trainer) -> None:
    """verl starts Nsight Systems around its controller and workers with these options; here profiling takes
    torch.profiler traces instead (``trainer.profile_steps`` with each role's ``profiler``), so a changed option is
    refused. Their defaults stay in the config for verl's scripts and recipes that carry them."""
    from verl.trainer.config.trainer import TrainerConfig

    defaults = TrainerConfig()
    for name in ("controller_nsight_options", "worker_nsight_options"):
        value, default = dict(getattr(trainer, name) or {}), getattr(defaults, name)
        if value != default:
            changed = {k: value.get(k) for k in sorted(set(value) | set(default)) if value.get(k) != default.get(k)}
            raise ConfigError(
                f"trainer.{name} set to {changed}: no Nsight Systems session is started here; trainer.profile_steps "
                "with a role's profiler (e.g. actor_rollout_ref.actor.profiler.ranks=[0]) writes torch.profiler "
                "Chrome traces, CUDA kernels included on GPU (docs/performance.md). Leave the options at their "
                "defaults, or run the job under nsys yourself"
            )


def _check_fsdp1_only_keys(config, use_critic: bool, use_ref: bool, use_rm: bool) -> None:
    """``wrap_policy.min_num_params`` and ``forward_prefetch`` configure FSDP1; FSDP2 (``fsdp2``, or ``fsdp`` on CPU)
    shards each transformer layer and prefetches on its own, so there a non-default value would do nothing."""
    arr, critic, rm = config.actor_rollout_ref, config.critic, config.reward_model
    sections = [("actor_rollout_ref.actor", arr.actor.strategy, arr.actor.fsdp_config)]
    sections += [("actor_rollout_ref.ref", arr.ref.strategy, arr.ref.fsdp_config)] if use_ref else []
    sections += [("critic", critic.strategy, critic.fsdp)] if use_critic else []
    sections += [("reward_model.model", rm.strategy, rm.model.fsdp_config)] if use_rm else []
    for key, strategy, fsdp in sections:
        if not (strategy == "fsdp2" or (strategy == "fsdp" and config.trainer.device == "cpu")):
            continue
        for name, value in (
            ("wrap_policy.min_num_params", fsdp.wrap_policy.min_num_params),
            ("forward_prefetch", fsdp.forward_prefetch),
        ):
            if value:
                block = "fsdp" if key == "critic" else "fsdp_config"
                raise ConfigError(
                    f"{key}.{block}.{name}={value} applies to FSDP1 only, and strategy={strategy!r} on "
                    f"{config.trainer.device} runs FSDP2 (one shard unit per transformer layer, its own "
                    "prefetching); leave it at its default"
                )


def _cxx_compiler() -> str | None:
    """The C++ compiler torch.compile's CPU backend would use, or None."""
    candidates = [os.environ["CXX"]] if os.environ.get("CXX") else []
    for name in candidates + ["g++", "c++", "clang++"]:
        found = shutil.which(name)
        if found:
            return found
    return None


def check_fused_head_model(config, text_config) -> None:
    """``use_fused_kernels=True`` with a model whose head transforms its logits (soft-capping, a scale): refused
    before Ray, since the fused head computes plain ``hidden @ weight.T``. ``text_config``: the policy's config."""
    arr = config.actor_rollout_ref
    key = next(
        (k for k, on in (("model", arr.model.use_fused_kernels), ("actor", arr.actor.use_fused_kernels)) if on), None
    )
    if key is None:
        return
    from verl.workers.engine.fsdp.fused_head import logit_transform_reason

    reason = logit_transform_reason(text_config)
    if reason is not None:
        raise ConfigError(f"actor_rollout_ref.{key}.use_fused_kernels=True: {reason}; set it False")


def _check_checkpointing_policy(key: str, model, strategy: str) -> None:
    """``gradient_checkpointing_policy``: valid, and ``selective`` only where it can act (checkpointing on, an FSDP
    engine)."""
    policy = model.gradient_checkpointing_policy
    check_gradient_checkpointing_policy(key, policy, model.enable_gradient_checkpointing)
    if policy == "selective" and strategy == "megatron":
        raise ConfigError(
            f"{key}.gradient_checkpointing_policy=selective applies to the FSDP engines; under strategy=megatron set "
            "megatron.override_transformer_config.recompute_granularity instead, or leave the policy at auto"
        )
