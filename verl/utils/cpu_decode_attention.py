"""Attention for token-by-token decoding on CPU, for the HF rollout.

PyTorch's CPU ``scaled_dot_product_attention`` kernel is tiled for long query blocks. With the single query row
of a decode step it is slow, and in bf16 very slow: on one core, 16 rows x 8 heads x 64 dims over 128 cached
positions took 1.9 ms in bf16 (0.44 ms in fp32). The plain matmul-softmax-matmul form took 0.26 ms in both. HF
``generate`` calls it once per layer per token, so on a 25M Qwen2 it was about a third of the rollout's time.

:func:`decode_attention_forward` computes a one-row query that way: one batched matmul per key-value group (no
``repeat_kv`` copy), the softmax in fp32 as HF's eager attention does, and the mask sdpa would get. Everything
else (prefill, training, position biases, attention sinks, dropout) goes to transformers' own sdpa function
unchanged. :func:`cpu_decode_attention` switches a model's decoder to it for the span of a ``with`` block.
"""

from __future__ import annotations

import contextlib

import torch

__all__ = ["IMPLEMENTATION", "cpu_decode_attention", "decode_attention_forward"]

IMPLEMENTATION = "verl_cpu_decode"
# keyword arguments of transformers' attention call that the decode form does not model: defer to sdpa
_DEFER_IF_SET = ("position_bias", "s_aux", "sinks", "softcap", "cache")


def _sdpa_attention_forward():
    from transformers.integrations.sdpa_attention import sdpa_attention_forward

    return sdpa_attention_forward


def decode_attention_forward(
    module: torch.nn.Module,
    query: torch.Tensor,
    key: torch.Tensor,
    value: torch.Tensor,
    attention_mask: torch.Tensor | None,
    dropout: float = 0.0,
    scaling: float | None = None,
    is_causal: bool | None = None,
    **kwargs,
) -> tuple[torch.Tensor, None]:
    """transformers' attention-function signature: ``query`` ``(b, heads, q, d)``, ``key``/``value``
    ``(b, kv_heads, k, d)``, ``attention_mask`` None, bool (True = attend) or additive float, broadcastable to
    ``(b, heads, q, k)``. Returns ``(b, q, heads, d_v)`` and no attention weights."""
    deferred = query.shape[2] != 1 or query.device.type != "cpu" or dropout > 0.0
    if deferred or any(kwargs.get(name) is not None for name in _DEFER_IF_SET):
        return _sdpa_attention_forward()(
            module, query, key, value, attention_mask, dropout=dropout, scaling=scaling, is_causal=is_causal, **kwargs
        )
    batch, heads, _, dim = query.shape
    kv_heads, kv_len = key.shape[1], key.shape[2]
    groups = heads // kv_heads
    scale = scaling if scaling is not None else dim**-0.5
    # the query heads of one kv head become the rows of one (groups, d) @ (d, k) product
    q = query.reshape(batch, kv_heads, groups, dim)
    scores = torch.matmul(q, key.transpose(-1, -2)).float() * scale  # (b, kv_heads, groups, k)
    if attention_mask is not None:
        mask = attention_mask[..., -kv_len:]
        if mask.shape[1] == heads:  # a per-head mask: one row per query head
            mask = mask.reshape(mask.shape[0], kv_heads, groups, kv_len)
        else:  # (b or 1, 1, 1, k)
            mask = mask.reshape(mask.shape[0], 1, 1, kv_len)
        if mask.dtype == torch.bool:
            scores = scores.masked_fill(~mask, float("-inf"))
        else:
            scores = scores + mask.float()
    probs = torch.softmax(scores, dim=-1).to(value.dtype)
    out = torch.matmul(probs, value)  # (b, kv_heads, groups, d_v)
    return out.reshape(batch, 1, heads, value.shape[-1]), None


def _register() -> None:
    from transformers import AttentionInterface

    AttentionInterface.register(IMPLEMENTATION, decode_attention_forward)
    try:  # transformers >= 4.53 builds masks per implementation; the decode form takes sdpa's
        from transformers.masking_utils import AttentionMaskInterface, sdpa_mask

        AttentionMaskInterface.register(IMPLEMENTATION, sdpa_mask)
    except ImportError:  # older releases give a custom implementation the eager (additive float) mask
        pass


def _all_configs(config) -> list:
    """``config`` and its sub-configs (vision, text, ...), parents first."""
    found, pending = [], [config]
    while pending:
        current = pending.pop(0)
        if current is None or any(current is seen for seen in found):
            continue
        found.append(current)
        pending.extend(getattr(current, key, None) for key in getattr(current, "sub_configs", {}) or {})
    return found


@contextlib.contextmanager
def cpu_decode_attention(model: torch.nn.Module):
    """Inside, ``model``'s language model attends with :func:`decode_attention_forward` where it used sdpa.

    Only the decoder switches (the model's config, or its ``text_config``): a vision tower keeps its own
    implementation. Every config's implementation is put back on the way out."""
    config = getattr(model, "config", None)
    if config is None or not hasattr(config, "_attn_implementation"):
        yield
        return
    _register()
    configs = _all_configs(config)
    saved = [(c, c._attn_implementation) for c in configs]
    text_config = config.get_text_config(decoder=True) if hasattr(config, "get_text_config") else config
    decoders = [c for c in (config, text_config) if c._attn_implementation == "sdpa"]
    try:
        for c in decoders:
            c._attn_implementation = IMPLEMENTATION
        # setting a parent cascades onto its sub-configs: give the others back what they had
        for c, impl in saved:
            if all(c is not d for d in decoders) and c._attn_implementation != impl:
                c._attn_implementation = impl
        yield
    finally:
        for c, impl in saved:
            c._attn_implementation = impl
