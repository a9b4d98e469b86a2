"""Attention patches for packed sequences and Ulysses sequence parallelism on Hugging Face models.

transformers (>= 4.48) looks up each attention layer's kernel at call time in ``ALL_ATTENTION_FUNCTIONS`` under
``config._attn_implementation``. :func:`apply_monkey_patch` wraps the registered ``sdpa`` and ``flash_attention_*``
kernels once per process. The wrapper does nothing unless an SP group of more than one rank is set
(:func:`verl.utils.ulysses.set_ulysses_sequence_parallel_group`), so models without SP are unaffected. Under SP each
rank holds ``1/sp`` of one packed row (``(1, nnz/sp)`` input ids, position ids restarting at 0 per sequence); the
wrapper all-to-alls q/k/v to "all tokens, ``1/sp`` of the heads", rebuilds the sequence boundaries from the gathered
position ids, runs the original kernel, and all-to-alls the output back.
"""

from __future__ import annotations

import functools
import logging
import math

import torch

from verl.utils.ulysses import (
    all_gather_tensor,
    gather_heads_scatter_seq,
    gather_seq_scatter_heads,
    get_ulysses_sequence_parallel_group,
    get_ulysses_sequence_parallel_world_size,
    validate_ulysses_config,
)

logger = logging.getLogger(__name__)

__all__ = ["ULYSSES_SKIP_ATTR", "apply_monkey_patch", "ulysses_attention"]

_PATCHED_IMPLEMENTATIONS = ("sdpa", "flash_attention_2", "flash_attention_3", "flash_attention_4")
_FLASH_VARLEN_KWARGS = ("cu_seq_lens_q", "cu_seq_lens_k", "max_length_q", "max_length_k")
_MARK = "_verl_ulysses_wrapped"
# set on attention modules that see whole sequences on every rank (a VLM's vision tower): never all-to-all'd
ULYSSES_SKIP_ATTR = "_verl_ulysses_skip"


def _block_causal_bool_mask(position_ids: torch.Tensor) -> torch.Tensor | None:
    """``(1, 1, S, S)`` boolean mask (True = attend): causal inside each packed sequence (a new one starts at every
    position 0). None when the row is one sequence, so sdpa can use its causal kernel."""
    pos = position_ids.reshape(-1)
    starts = pos == 0
    if starts[1:].sum() == 0:
        return None
    seq_id = torch.cumsum(starts.long(), dim=0)
    idx = torch.arange(pos.numel(), device=pos.device)
    allowed = (seq_id[:, None] == seq_id[None, :]) & (idx[:, None] >= idx[None, :])
    return allowed[None, None]


def _expand_kv_heads(key: torch.Tensor, value: torch.Tensor, num_heads: int, sp: int):
    """Repeat k/v heads (GQA) until their count is divisible by ``sp``; returns the new kv-group size too.

    Each kv head is repeated ``r`` times in place, so query head ``j`` still meets its own kv head.
    """
    kv_heads = key.size(1)
    if kv_heads % sp == 0:
        return key, value, num_heads // kv_heads
    repeat = sp // math.gcd(kv_heads, sp)
    key = key.repeat_interleave(repeat, dim=1)
    value = value.repeat_interleave(repeat, dim=1)
    return key, value, num_heads // key.size(1)


def ulysses_attention(base_fn):
    """Wrap an HF attention kernel ``fn(module, q, k, v, attention_mask, **kw) -> (out, weights)`` for Ulysses SP.

    q ``(bs, heads, seq/sp, head_dim)``, k/v ``(bs, kv_heads, seq/sp, head_dim)``; out ``(bs, seq/sp, heads,
    head_dim)``. A pass-through when no SP group of size > 1 is set.
    """
    if getattr(base_fn, _MARK, False):
        return base_fn

    @functools.wraps(base_fn)
    def wrapper(module, query, key, value, attention_mask, *args, **kwargs):
        sp = get_ulysses_sequence_parallel_world_size()
        if sp <= 1 or getattr(module, ULYSSES_SKIP_ATTR, False):
            return base_fn(module, query, key, value, attention_mask, *args, **kwargs)
        group = get_ulysses_sequence_parallel_group()
        num_heads = query.size(1)
        key, value, kv_groups = _expand_kv_heads(key, value, num_heads, sp)
        query = gather_seq_scatter_heads(query, seq_dim=2, head_dim=1, group=group)
        key = gather_seq_scatter_heads(key, seq_dim=2, head_dim=1, group=group)
        value = gather_seq_scatter_heads(value, seq_dim=2, head_dim=1, group=group)

        # The model built its mask from this rank's slice; the boundaries of the whole row come from the gathered
        # position ids instead.
        position_ids = kwargs.get("position_ids")
        if position_ids is not None:
            position_ids = all_gather_tensor(position_ids.reshape(1, -1), gather_dim=-1, group=group)
        for name in _FLASH_VARLEN_KWARGS:
            kwargs.pop(name, None)
        is_flash = "flash" in str(getattr(getattr(module, "config", None), "_attn_implementation", ""))
        if is_flash:
            kwargs["position_ids"] = position_ids
            attention_mask = None
        else:
            kwargs.pop("position_ids", None)
            attention_mask = _block_causal_bool_mask(position_ids) if position_ids is not None else None

        saved_groups = getattr(module, "num_key_value_groups", None)
        if saved_groups is not None:
            module.num_key_value_groups = kv_groups
        try:
            out, _ = base_fn(module, query, key, value, attention_mask, *args, **kwargs)
        finally:
            if saved_groups is not None:
                module.num_key_value_groups = saved_groups
        # out: (bs, seq, heads/sp, head_dim) -> (bs, seq/sp, heads, head_dim)
        out = gather_heads_scatter_seq(out, head_dim=2, seq_dim=1, group=group)
        return out, None

    setattr(wrapper, _MARK, True)
    return wrapper


def _patch_attention_functions() -> None:
    """Wrap the registered sdpa / flash-attention kernels once per process (idempotent)."""
    from transformers.modeling_utils import AttentionInterface

    for name in _PATCHED_IMPLEMENTATIONS:
        fn = AttentionInterface._global_mapping.get(name)
        if fn is not None and not getattr(fn, _MARK, False):
            AttentionInterface.register(name, ulysses_attention(fn))


def apply_monkey_patch(
    model: torch.nn.Module,
    ulysses_sp_size: int = 1,
    use_remove_padding: bool = True,
    use_fused_kernels: bool = False,
    fused_kernels_backend: str | None = None,
) -> None:
    """Prepare an HF causal LM for packed inputs and, with ``ulysses_sp_size > 1``, Ulysses sequence parallelism.

    Packed inputs need no patch on transformers >= 4.53 (sequence boundaries come from the position ids). For SP the
    attention kernels are wrapped (see module doc); ``eager`` attention is switched to ``sdpa`` because the eager
    kernel is model-specific and not registered globally. ``use_fused_kernels`` is accepted for interface
    compatibility; fused kernels are not part of this build, so it raises.
    """
    if use_fused_kernels:
        raise NotImplementedError(
            f"use_fused_kernels=True (backend {fused_kernels_backend!r}) is not supported in this build; set it False"
        )
    if ulysses_sp_size <= 1:
        return
    config = getattr(model, "config", None)
    num_heads = getattr(config, "num_attention_heads", None)
    if num_heads is None:
        text_config = getattr(config, "text_config", None)
        num_heads = getattr(text_config, "num_attention_heads", None)
    if num_heads is not None:
        validate_ulysses_config(num_heads, ulysses_sp_size)
    if not use_remove_padding:
        logger.warning("Ulysses sequence parallelism expects packed inputs (use_remove_padding=True)")
    impl = getattr(config, "_attn_implementation", None)
    if impl not in _PATCHED_IMPLEMENTATIONS:
        logger.warning("attn_implementation=%r does not support Ulysses sequence parallelism; using sdpa", impl)
        if hasattr(model, "set_attn_implementation"):
            model.set_attn_implementation("sdpa")
        else:
            config._attn_implementation = "sdpa"
    _patch_attention_functions()
    if getattr(config, "vision_config", None) is not None:
        from verl.models.transformers.qwen2_vl import ulysses_text_model

        if not ulysses_text_model(model):
            raise NotImplementedError(
                f"ulysses_sequence_parallel_size={ulysses_sp_size} with a {type(model).__name__}: sequence "
                "parallelism for vision-language models is implemented for Qwen2-VL / Qwen2.5-VL only; use 1"
            )
