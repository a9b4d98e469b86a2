"""Attention on CPU where PyTorch's fused sdpa kernel is slow: decode steps, and training backwards in bf16.

PyTorch's CPU ``scaled_dot_product_attention`` kernel is tiled for long query blocks and keeps the attention
matrix out of memory. Two cases pay for it on one core (16 rows, 8-9 heads of 64 dims):
- A decode step, one query row over 128 cached positions: 1.9 ms in bf16 and 0.44 ms in fp32. The plain
  matmul-softmax-matmul form takes 0.23-0.32 ms in both. HF ``generate`` calls it once per layer per token; on a
  25M Qwen2 it was 28% of the HF rollout's time.
- The backward of a bf16 training pass over 190 tokens: sdpa's forward and backward took 130 ms a layer, the
  plain form 89 ms (with the scores in fp32). On SmolLM2-135M's shape the update took 20.7 s instead of 23.7 s.

:func:`cpu_attention_forward` computes those two cases in the plain form: one batched matmul per key-value group
(no ``repeat_kv`` copy), the scores and the softmax in fp32, and the mask sdpa would get. The training case is
taken only while the score matrix stays small (:data:`MATH_FORM_MAX_SCORES` elements per layer), because the
backward keeps it. Everything else (fp32 training, no-grad passes, long or packed rows, position biases,
attention sinks, dropout) goes to the registered sdpa function unchanged, Ulysses' wrapper included.
:func:`cpu_attention` switches a model's decoder to it for the span of a ``with`` block.
"""

from __future__ import annotations

import contextlib

import torch

__all__ = [
    "IMPLEMENTATION",
    "MATH_FORM_MAX_SCORES",
    "cpu_attention",
    "cpu_attention_forward",
    "math_attention",
    "training_attention",
]

IMPLEMENTATION = "verl_cpu"
# the plain form's backward keeps (b, heads, q, k) fp32 scores and bf16 probabilities: about 100 MB a layer at this size
MATH_FORM_MAX_SCORES = 1 << 24
_HALF = (torch.bfloat16, torch.float16)
# keyword arguments of transformers' attention call that the plain form does not model: defer to sdpa
_DEFER_IF_SET = ("position_bias", "s_aux", "sinks", "softcap", "cache")


def _sdpa(module, query, key, value, attention_mask, **kwargs):
    """The sdpa function transformers has registered (wrapped for Ulysses where that is on)."""
    from transformers import AttentionInterface

    return AttentionInterface._global_mapping["sdpa"](module, query, key, value, attention_mask, **kwargs)


def _takes_math_form(query: torch.Tensor, key: torch.Tensor, dropout: float, kwargs: dict) -> bool:
    if query.device.type != "cpu" or dropout > 0.0 or any(kwargs.get(name) is not None for name in _DEFER_IF_SET):
        return False
    batch, heads, q_len, _ = query.shape
    if q_len == 1:
        return True
    small = batch * heads * q_len * key.shape[2] <= MATH_FORM_MAX_SCORES
    return small and torch.is_grad_enabled() and query.dtype in _HALF


def _causal_without_mask(module, query, key, attention_mask, is_causal) -> bool | None:
    """sdpa's reading of a call without a mask: causal unless told otherwise. transformers leaves the mask out of a
    causal batch without padding and lets sdpa's ``is_causal`` do it. None: a causal call whose query and key
    lengths differ, whose alignment only sdpa itself settles."""
    if attention_mask is not None or query.shape[2] == 1:
        return False
    causal = is_causal if is_causal is not None else getattr(module, "is_causal", True)
    if causal and query.shape[2] != key.shape[2]:
        return None
    return bool(causal)


def math_attention(
    query: torch.Tensor,
    key: torch.Tensor,
    value: torch.Tensor,
    attention_mask: torch.Tensor | None,
    scaling: float | None = None,
    fp32_products: bool = True,
) -> torch.Tensor:
    """``softmax(q k^T * scaling + mask) v``, the softmax in fp32: ``query`` ``(b, heads, q, d)``, ``key``/``value``
    ``(b, kv_heads, k, d)``, ``attention_mask`` None, bool (True = attend) or additive float, broadcastable to
    ``(b, heads, q, k)``. Returns ``(b, q, heads, d_v)``. ``fp32_products``: ``q k^T`` in fp32 too; otherwise in
    the inputs' dtype, rounded before the softmax as HF's eager attention does (a bf16 decode step: 0.23 against
    0.36 ms).

    A row with nothing to attend to (a padding query) gets the mean of the values instead of sdpa's zeros or NaNs;
    no loss reads it, and its gradient stays finite."""
    batch, heads, q_len, dim = query.shape
    kv_heads, kv_len = key.shape[1], key.shape[2]
    groups = heads // kv_heads
    scale = scaling if scaling is not None else dim**-0.5
    # the query heads of one kv head become the rows of one (groups * q, d) @ (d, k) product
    q = query.reshape(batch, kv_heads, groups * q_len, dim)
    acc = torch.promote_types(query.dtype, torch.float32)  # fp32, or fp64 for fp64 inputs
    if fp32_products:  # scaling q, not the (q, k) scores: a third of the elements at q = 3d
        scores = torch.matmul(q.to(acc) * scale, key.to(acc).transpose(-1, -2))
    else:
        scores = torch.matmul(q, key.transpose(-1, -2)).to(acc) * scale  # (b, kv_heads, groups * q, k)
    scores = scores.view(batch, kv_heads, groups, q_len, kv_len)
    if attention_mask is not None:
        mask = attention_mask[..., -kv_len:]
        if mask.shape[1] == heads:  # a per-head mask
            mask = mask.reshape(mask.shape[0], kv_heads, groups, mask.shape[-2], kv_len)
        else:  # (b or 1, 1, q or 1, k)
            mask = mask.reshape(mask.shape[0], 1, 1, mask.shape[-2], kv_len)
        if mask.dtype == torch.bool:
            scores = scores.masked_fill(~mask, torch.finfo(acc).min)
        else:
            scores = scores + mask.to(acc)
    probs = torch.softmax(scores, dim=-1).to(value.dtype).view(batch, kv_heads, groups * q_len, kv_len)
    out = torch.matmul(probs, value).view(batch, kv_heads, groups, q_len, value.shape[-1])
    return out.permute(0, 3, 1, 2, 4).reshape(batch, q_len, heads, value.shape[-1])


def cpu_attention_forward(
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
    """transformers' attention-function signature; see the module doc for which calls take the plain form."""
    if _takes_math_form(query, key, dropout, kwargs):
        causal = _causal_without_mask(module, query, key, attention_mask, is_causal)
        if causal is not None:
            if causal:
                q_len = query.shape[2]
                attention_mask = torch.ones(q_len, q_len, dtype=torch.bool, device=query.device).tril()[None, None]
            decoding = query.shape[2] == 1
            return math_attention(query, key, value, attention_mask, scaling, fp32_products=not decoding), None
    return _sdpa(
        module, query, key, value, attention_mask, dropout=dropout, scaling=scaling, is_causal=is_causal, **kwargs
    )


def _register() -> None:
    from transformers import AttentionInterface

    from verl.workers.engine.fsdp.packed_attention import per_sequence

    # a packed row's attention runs per sequence here too, before the plain form sees the whole row
    AttentionInterface.register(IMPLEMENTATION, per_sequence(cpu_attention_forward))
    try:  # transformers >= 4.53 builds masks per implementation; this one takes sdpa's
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
def cpu_attention(model: torch.nn.Module):
    """Inside, ``model``'s language model attends with :func:`cpu_attention_forward` where it used sdpa.

    Only the decoder switches (the model's config, or its ``text_config``): a vision tower keeps its own
    implementation. Every config's implementation is put back on the way out. Gradient checkpointing recomputes
    attention in the backward, so a training pass keeps the block open through its backward."""
    config = getattr(model, "config", None)
    if config is None or not hasattr(config, "_attn_implementation"):
        yield
        return
    _register()
    saved = [(c, c._attn_implementation) for c in _all_configs(config)]
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


def training_attention(model: torch.nn.Module, device: torch.device, ulysses_sp_size: int = 1):
    """The context an update (actor or critic) runs its forwards and backwards in: :func:`cpu_attention` on CPU,
    where its plain form runs a bf16 backward about 1.5x faster than sdpa's kernel; nothing elsewhere, nor under
    Ulysses sequence parallelism, whose all-to-all wraps sdpa itself. Keep it open through the backward: gradient
    checkpointing recomputes attention there."""
    if device.type != "cpu" or ulysses_sp_size > 1:
        return contextlib.nullcontext()
    return cpu_attention(model)
