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

_QAT = "quantization-aware training (verl's QAT, NVFP4 weights) is not implemented here; train without it"
_TURBO = "verl's fsdp_turbo engine is not here; the FSDP engine (strategy fsdp or fsdp2) takes no turbo settings"
_PAD = (
    "bucketed padding of packed micro batches (fixed kernel shapes) is not implemented here; packed micro batches "
    "keep their own lengths"
)
_DETERMINISM = (
    "full determinism (deterministic kernels, seeded from fsdp seed) is not implemented here; seed the run with "
    "data.seed and actor_rollout_ref.rollout.seed"
)
_DETERMINISM_SEED = "verl reads it only with full_determinism, which is not implemented here; leave it at its default"
_ENGINE_STRATEGY = "verl overwrites it with the role's strategy; set {role}.strategy (fsdp or fsdp2) instead"
_ORIG_PARAMS = "the FSDP engine builds FSDP1's flat parameters itself (FSDP2 keeps the original ones); leave it false"
_NO_SYNC = (
    "gradients are reduced per micro batch on accelerators (on CPU the engine already reduces once per mini batch); "
    "deferring them is not implemented: leave it false"
)
_ASYNC_SAVE = "checkpoints are saved synchronously here (verl saves asynchronously with Megatron only); leave it False"
_SHUFFLE_SEED = "it seeds the mini-batch shuffle of shuffle=True, which is refused here; leave it at its default"
_NO_ENTROPY = "the value model computes no entropy (the policy's forward does); leave it at its default"


def _engine_block(block: str, role: str) -> dict[str, str]:
    """The engine-block keys verl 0.9 added that the FSDP engine does not implement, for ``block`` (a dotted path)."""
    return {
        f"{block}.use_orig_params": _ORIG_PARAMS,
        f"{block}.seed": _DETERMINISM_SEED,
        f"{block}.full_determinism": _DETERMINISM,
        f"{block}.use_no_sync_for_gradient_accumulation": _NO_SYNC,
        f"{block}.pad_to_length": _PAD,
        f"{block}.pad_to_length_bucket": _PAD,
        f"{block}.forward_only": "the role decides (the actor and critic train, the reference only runs forwards); "
        "leave it at its default",
        f"{block}.strategy": _ENGINE_STRATEGY.format(role=role),
        f"{block}.qat.*": _QAT,
        f"{block}.turbo_config": _TURBO,
    }


# One table per part of the config (dotted key, or 'section.*' for every key below it -> why it cannot be honoured
# and what to do instead); UNSUPPORTED joins them.

# actor_rollout_ref.actor, .ref, engine and optimizer blocks, critic
_ROLE_KEYS: dict[str, str] = {
    "actor_rollout_ref.ref.fsdp_config.fsdp_size": _SHARES_ACTOR_MESH.format(name="fsdp_size"),
    "actor_rollout_ref.ref.fsdp_config.offload_policy": _SHARES_ACTOR_MESH.format(name="offload_policy"),
    "actor_rollout_ref.ref.fsdp_config.optimizer_offload": "the reference has no optimizer; leave it at its default",
    "actor_rollout_ref.actor.calculate_sum_pi_squared": (
        "the sum of squared token probabilities feeds verl's optimal-token-baseline estimator, which is not here; "
        "leave it false"
    ),
    "actor_rollout_ref.actor.checkpoint.async_save": _ASYNC_SAVE,
    "actor_rollout_ref.actor.checkpoint.strict": (
        "it relaxes verl's Megatron-bridge export of Hugging Face weights, which is not here (every tensor is "
        "exported); leave it True"
    ),
    "actor_rollout_ref.actor.data_loader_seed": _SHUFFLE_SEED,
    "actor_rollout_ref.actor.freeze_vision_tower": (
        "freezing a vision-language policy's vision tower is not implemented (verl 0.9 declares the key but reads it "
        "nowhere either); the whole policy is trained"
    ),
    "actor_rollout_ref.actor.pad_to_length": _PAD,
    "actor_rollout_ref.actor.policy_loss.dro_beta": (
        "it is the coefficient of verl's DRO loss (loss_mode=dro), which is not here; pick a registered "
        "policy_loss.loss_mode"
    ),
    "actor_rollout_ref.actor.qat.*": _QAT,
    "actor_rollout_ref.actor.use_prefix_grouper": (
        "the shared-prefix forward (PrefixGrouper) is not implemented; each response runs with its own prompt"
    ),
    **_engine_block("actor_rollout_ref.actor.fsdp_config", "actor_rollout_ref.actor"),
    "actor_rollout_ref.ref.pad_to_length": _PAD,
    **_engine_block("actor_rollout_ref.ref.fsdp_config", "actor_rollout_ref.ref"),
    "critic.checkpoint.async_save": _ASYNC_SAVE,
    "critic.data_loader_seed": _SHUFFLE_SEED,
    **_engine_block("critic.fsdp", "critic"),
    "critic.fsdp.entropy_from_logits_with_chunking": _NO_ENTROPY,
    "critic.fsdp.entropy_from_logits_chunk_size": _NO_ENTROPY,
    "critic.fsdp.entropy_checkpointing": _NO_ENTROPY,
    "critic.fsdp.use_torch_compile": "it compiles the policy's entropy; the value model has none: leave it at its "
    "default",
}

_ROLLOUT = "actor_rollout_ref.rollout"
_SERVER_MODE = (
    "verl's server-mode rollout (engines behind HTTP servers and a router); here each worker drives its engine in "
    "process, so leave it at its default"
)
_MOE_ROLLOUT = "the rollout here has no expert, pipeline or in-replica data parallelism; leave it at 1"
_MEGATRON_LORA = (
    "verl's Megatron (megatron-bridge) LoRA; LoRA here is the FSDP engine's: set {model}.lora_rank, lora_alpha, "
    "target_modules and exclude_modules instead"
)
_MTP = "multi-token prediction (training the MTP layers, speculative decoding with them) is not implemented here"
_TILED_MLP = "the tiled MLP is not implemented here; enable_gradient_checkpointing saves activation memory instead"
_DISTILLATION = "on-policy distillation is not implemented yet; leave the distillation section at its defaults"
_TEACHER_INFERENCE = (
    "gpu_memory_utilization", "enforce_eager", "cudagraph_capture_sizes", "free_cache_engine", "data_parallel_size",
    "expert_parallel_size", "tensor_model_parallel_size", "max_num_batched_tokens", "max_model_len", "max_num_seqs",
    "load_format", "engine_kwargs", "limit_images", "enable_chunked_prefill", "enable_prefix_caching",
    "disable_log_stats", "skip_tokenizer_init",
)  # fmt: skip
# model.lora: all but `merge`, which the hand-off honours (it always merges)
_MEGATRON_LORA_KEYS = (
    "type", "rank", "alpha", "dropout", "target_modules", "exclude_modules", "dropout_position",
    "lora_A_init_method", "lora_B_init_method", "a2a_experimental", "dtype", "adapter_path", "freeze_vision_model",
    "freeze_vision_projection", "freeze_language_model",
)  # fmt: skip

# actor_rollout_ref.rollout, actor_rollout_ref.model (and critic.model), distillation
_ROLLOUT_MODEL_KEYS: dict[str, str] = {
    f"{_ROLLOUT}.full_determinism": (
        "batch-invariant sampling (vLLM's batch-invariant kernels, a seed per request) is not implemented here; "
        "actor_rollout_ref.rollout.seed already makes the sampling of a given batch repeatable"
    ),
    f"{_ROLLOUT}.data_parallel_size": _MOE_ROLLOUT + " (every tensor_model_parallel_size ranks run an engine of their "
    "own, so the rollout is data-parallel across them already)",
    f"{_ROLLOUT}.expert_parallel_size": _MOE_ROLLOUT,
    f"{_ROLLOUT}.pipeline_model_parallel_size": _MOE_ROLLOUT,
    f"{_ROLLOUT}.over_sample_rate": (
        "aborting a generation's last requests is not implemented: every response is generated to its end"
    ),
    f"{_ROLLOUT}.engine_kwargs.trtllm": "there is no TensorRT-LLM rollout here (rollout.name is hf or vllm)",
    f"{_ROLLOUT}.router_config_path": _SERVER_MODE,
    f"{_ROLLOUT}.agent.custom_async_server.*": _SERVER_MODE,
    f"{_ROLLOUT}.prometheus.enable": _SERVER_MODE,
    f"{_ROLLOUT}.prometheus.port": _SERVER_MODE,
    f"{_ROLLOUT}.prometheus.file": _SERVER_MODE,
    f"{_ROLLOUT}.agent.num_workers": (
        "the agent loops run inside each rollout worker (as many as the rollout's ranks), not in a pool of "
        "agent-loop actors of their own; leave it at its default"
    ),
    f"{_ROLLOUT}.multi_turn.function_tool_path": (
        "function tools are not implemented; declare the tools in a tool config (multi_turn.tool_config_path, "
        "docs/multiturn.md)"
    ),
    f"{_ROLLOUT}.multi_turn.num_repeat_rollouts": "verl reads this key nowhere either; use actor_rollout_ref.rollout.n",
    f"{_ROLLOUT}.trace.backend": (
        "tracing agent-loop trajectories (mlflow, weave, trackio) is not implemented; trainer.logger sends the "
        "metrics to those trackers, and trainer.log_val_generations sample generations"
    ),
    f"{_ROLLOUT}.trace.token2text": "only read with trace.backend, which is not implemented",
    f"{_ROLLOUT}.trace.max_samples_per_step_per_worker": "only read with trace.backend, which is not implemented",
    f"{_ROLLOUT}.skip_tokenizer_init": (
        "read by verl's SGLang and TensorRT-LLM rollouts only; its vLLM rollout, like the HF and vLLM rollouts here, "
        "always loads the tokenizer"
    ),
    f"{_ROLLOUT}.enable_rollout_routing_replay": "MoE routing replay is not implemented",
    f"{_ROLLOUT}.moe_load_balance_metrics_interval": "MoE routing replay, which it reads, is not implemented",
    f"{_ROLLOUT}.quantization": (
        "a quantized rollout is not implemented: each hand-off loads the actor's unquantized weights into the engine"
    ),
    f"{_ROLLOUT}.quantization_config_file": "a quantized rollout is not implemented",
    f"{_ROLLOUT}.mtp.*": _MTP,
    f"{_ROLLOUT}.qat": "quantization-aware training is not implemented",
    f"{_ROLLOUT}.disaggregation.*": "prefill/decode disaggregation is SGLang's, and there is no SGLang rollout here",
    "actor_rollout_ref.model.mtp.*": _MTP,
    "actor_rollout_ref.model.tiled_mlp.*": _TILED_MLP,
    **{
        f"actor_rollout_ref.model.lora.{name}": _MEGATRON_LORA.format(model="actor_rollout_ref.model")
        for name in _MEGATRON_LORA_KEYS
    },
    "critic.model.custom_chat_template": "the critic scores the rollout's token ids; it applies no chat template",
    "critic.model.use_liger": "the Liger kernels are applied only by the SFT trainer here",
    "critic.model.use_fused_kernels": (
        "the fused head computes log-probs over a vocabulary; the value head has none (it is the policy's option)"
    ),
    "critic.model.fused_kernel_options.*": "the critic has no fused head (see critic.model.use_fused_kernels)",
    "critic.model.lora.*": _MEGATRON_LORA.format(model="critic.model"),
    "critic.model.mtp.*": _MTP,
    "critic.model.tiled_mlp.*": _TILED_MLP,
    "distillation.enabled": _DISTILLATION,
    "distillation.distillation_loss.*": _DISTILLATION,
    "distillation.n_gpus_per_node": _DISTILLATION,
    "distillation.nnodes": _DISTILLATION,
    "distillation.teacher_key": _DISTILLATION,
    **{
        f"distillation.teacher_models.teacher_model.{name}": _DISTILLATION
        for name in ("key", "model_path", "num_replicas")
    },
    **{f"distillation.teacher_models.teacher_model.inference.{name}": _DISTILLATION for name in _TEACHER_INFERENCE},
}

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
