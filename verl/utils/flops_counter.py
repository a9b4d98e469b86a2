"""Estimate training FLOPs of decoder-only transformers, for the MFU metric (`perf/mfu/actor`)."""

from __future__ import annotations

import logging

logger = logging.getLogger(__name__)

__all__ = ["FlopsCounter", "get_device_flops", "mfu"]

_UNITS = {"B": 1e9, "K": 1e3, "M": 1e6, "G": 1e9, "T": 1e12, "P": 1e15}

# Dense bf16 peak FLOP/s by a substring of the accelerator's name. Order matters: first match wins.
_PEAK_FLOPS = [
    ("MI300X", 1336e12),
    ("H100", 989e12),
    ("H800", 989e12),
    ("H200", 989e12),
    ("A100", 312e12),
    ("A800", 312e12),
    ("L40", 181.05e12),
    ("L20", 119.5e12),
    ("H20", 148e12),
    ("910B", 354e12),
    ("RTX 3070 Ti", 21.75e12),
]

_DENSE = ("qwen2", "llama", "qwen2_vl", "qwen2_5_vl", "qwen3", "minicpmv", "minicpmo", "mistral")
_MOE = ("qwen2_moe", "qwen3_moe")


def _accelerator_name() -> str | None:
    """Name of the current accelerator, or None on a CPU-only process."""
    from verl.utils.device import get_device_name, get_torch_device

    if get_device_name() == "cpu":
        return None
    try:
        return get_torch_device().get_device_name()
    except Exception:  # noqa: BLE001 - an unknown device only means "no peak figure"
        return None


def get_device_flops(unit: str = "T") -> float:
    """Peak dense FLOP/s of this process's accelerator in `unit` (K, M, G, T, P); inf when unknown or on CPU.

    An infinite peak makes MFU exactly 0 instead of a division error on machines without a known accelerator.
    """
    if unit not in _UNITS:
        raise ValueError(f"unit={unit!r} is not one of {sorted(_UNITS)}")
    name = _accelerator_name()
    flops = float("inf")
    if name is not None:
        for key, value in _PEAK_FLOPS:
            if key in name:
                flops = value
                break
    return flops / _UNITS[unit]


def _lm_head_params(config) -> int:
    """The output projection's weights. The input embedding is a table lookup, not a matmul, so it costs no FLOPs
    (verl counts it like the head, ``2 * vocab * hidden``: at SmolLM2-135M's shape, where the vocabulary is a fifth of
    the weights, that reads 21% more FLOPs than run, and MFU above 100% on a CPU)."""
    return config.vocab_size * config.hidden_size


class FlopsCounter:
    """Estimate achieved TFLOP/s of one training step of a Hugging Face causal LM.

    Forward+backward costs 6 FLOPs per parameter per token (matmuls) plus the attention score terms,
    which grow with the square of each sequence's length.
    """

    def __init__(self, config):
        self.config = config.get_text_config() if hasattr(config, "get_text_config") else config
        self.model_type = getattr(config, "model_type", None)
        if self.model_type not in _DENSE + _MOE + ("deepseek_v3",):
            logger.warning("FlopsCounter: model_type %r is not supported; MFU will be reported as 0", self.model_type)

    def _dense_core(self) -> tuple[int, int, int, int]:
        c = self.config
        hidden = c.hidden_size
        heads = c.num_attention_heads
        kv_heads = getattr(c, "num_key_value_heads", None) or heads
        head_dim = getattr(c, "head_dim", None) or hidden // heads
        q = heads * head_dim
        kv = kv_heads * head_dim
        attn_linear = hidden * (q + kv + kv + heads * head_dim)
        return hidden, head_dim, heads, attn_linear

    def _flops_dense(self, tokens_sum: int, seqlen_square_sum: int, delta_time: float, moe: bool = False) -> float:
        c = self.config
        hidden, head_dim, heads, attn_linear = self._dense_core()
        if moe:
            mlp = hidden * c.num_experts_per_tok * c.moe_intermediate_size * 3 + hidden * c.num_experts
        else:
            mlp = 3 * hidden * c.intermediate_size
        layers = c.num_hidden_layers
        params = layers * (mlp + attn_linear) + _lm_head_params(c)
        flops = 6 * params * tokens_sum + 12 * seqlen_square_sum * head_dim * heads * layers
        return flops / delta_time / 1e12

    def _flops_deepseek_v3(self, tokens_sum: int, seqlen_square_sum: int, delta_time: float) -> float:
        c = self.config
        hidden, heads, layers = c.hidden_size, c.num_attention_heads, c.num_hidden_layers
        qk_head = c.qk_nope_head_dim + c.qk_rope_head_dim
        if getattr(c, "q_lora_rank", None) is None:
            q_proj = hidden * heads * qk_head
        else:
            q_proj = hidden * c.q_lora_rank + c.q_lora_rank * heads * qk_head
        kv_proj = hidden * (c.kv_lora_rank + c.qk_rope_head_dim) + c.kv_lora_rank * heads * (
            c.qk_nope_head_dim + c.v_head_dim
        )
        o_proj = heads * c.v_head_dim * hidden
        attn_linear = q_proj + kv_proj + o_proj
        dense_layers = c.first_k_dense_replace
        experts_active = c.num_experts_per_tok + (c.n_shared_experts or 0)
        moe_mlp = hidden * c.moe_intermediate_size * 3 * experts_active + hidden * c.n_routed_experts
        params = (
            layers * attn_linear
            + dense_layers * 3 * hidden * c.intermediate_size
            + (layers - dense_layers) * moe_mlp
            + _lm_head_params(c)
        )
        flops = 6 * params * tokens_sum + 12 * seqlen_square_sum * layers * qk_head * heads
        return flops / delta_time / 1e12

    def estimate_flops(self, batch_seqlens: list[int], delta_time: float) -> tuple[float, float]:
        """Return (achieved TFLOP/s, peak TFLOP/s of this device) for sequences of the given lengths in delta_time s."""
        tokens_sum = int(sum(batch_seqlens))
        seqlen_square_sum = int(sum(int(s) * int(s) for s in batch_seqlens))
        if delta_time <= 0:
            achieved = 0.0
        elif self.model_type in _DENSE:
            achieved = self._flops_dense(tokens_sum, seqlen_square_sum, delta_time)
        elif self.model_type in _MOE:
            achieved = self._flops_dense(tokens_sum, seqlen_square_sum, delta_time, moe=True)
        elif self.model_type == "deepseek_v3":
            achieved = self._flops_deepseek_v3(tokens_sum, seqlen_square_sum, delta_time)
        else:
            achieved = 0.0
        return achieved, get_device_flops()


def mfu(achieved_tflops: float, promised_tflops: float, world_size: int = 1) -> float:
    """Model FLOPs utilisation in [0, 1]; 0 when the peak is unknown (inf) or zero."""
    if not promised_tflops or promised_tflops == float("inf") or world_size <= 0:
        return 0.0
    return achieved_tflops / promised_tflops / world_size
