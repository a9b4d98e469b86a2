"""Attention over a packed row computed one sequence at a time, where the attention kernel has no varlen form.

A packed forward (``use_remove_padding``) puts the valid tokens of a micro batch in one ``(1, nnz)`` row. On GPU,
flash-attention's varlen kernel attends inside each sequence. transformers' sdpa path (CPU, or a GPU without
flash-attn) instead builds a block-diagonal mask over the whole row and attends every token to every other: about
``nnz^2`` work where the sequences need ``sum L^2``. At 8 sequences of 153 tokens on a 25M Qwen2 that doubled the
cost of a forward and backward, and made the packed path slower than the padded one it is meant to beat.

The packed forward passes the sequence boundaries as transformers' varlen keywords (``cu_seq_lens_q`` ...,
:func:`packed_sequence_kwargs`); :func:`per_sequence` wraps an attention function so that a call carrying them
runs the function once per run of equal-length neighbouring sequences, causal and without a mask, each run as a
batch (a view of the packed tensors: full-length rows cost one call, as in the padded path). Calls without them
are passed through unchanged. :func:`install` wraps transformers' registered ``sdpa`` once per process.
"""

from __future__ import annotations

import functools

import torch

__all__ = ["VARLEN_KWARGS", "install", "packed_sequence_kwargs", "per_sequence"]

VARLEN_KWARGS = ("cu_seq_lens_q", "cu_seq_lens_k", "max_length_q", "max_length_k")
_MARK = "_verl_per_sequence"


def packed_sequence_kwargs(position_ids: torch.Tensor) -> dict:
    """The varlen keywords of a packed row whose position ids restart at 0 with each sequence: ``cu_seq_lens_q``
    and ``_k`` (int32 ``(num_sequences + 1,)`` offsets) and ``max_length_q`` and ``_k``.

    position_ids: ``(1, nnz)``."""
    pos = position_ids.reshape(-1)
    starts = torch.nonzero(pos == 0).reshape(-1)
    if starts.numel() == 0 or int(starts[0]) != 0:  # a row that does not begin a sequence: one sequence
        starts = torch.cat([starts.new_zeros(1), starts])
    cu = torch.cat([starts, starts.new_tensor([pos.numel()])]).to(torch.int32)
    longest = int((cu[1:] - cu[:-1]).max())
    return {"cu_seq_lens_q": cu, "cu_seq_lens_k": cu, "max_length_q": longest, "max_length_k": longest}


def _runs(cu: list[int]) -> list[tuple[int, int, int]]:
    """``(start, count, length)`` of each run of neighbouring sequences of one length."""
    runs: list[tuple[int, int, int]] = []
    for start, end in zip(cu[:-1], cu[1:], strict=True):
        length = end - start
        if runs and runs[-1][2] == length:
            first, count, _ = runs[-1]
            runs[-1] = (first, count + 1, length)
        else:
            runs.append((start, 1, length))
    return runs


def _as_batch(states: torch.Tensor, start: int, count: int, length: int) -> torch.Tensor:
    """``(1, heads, nnz, d)`` -> the run's ``(count, heads, length, d)`` (a view)."""
    part = states[0, :, start : start + count * length]
    return part.unflatten(1, (count, length)).transpose(0, 1)


def per_sequence(fn):
    """Wrap a transformers attention function ``fn(module, q, k, v, attention_mask, **kw) -> (out, weights)``:
    a packed call (batch 1, the varlen keywords set, queries and keys of the row's length, no sliding window)
    attends within each sequence; every other call is ``fn``'s own.

    q ``(1, heads, nnz, d)``, k/v ``(1, kv_heads, nnz, d)``; returns ``((1, nnz, heads, d_v), None)``."""
    if getattr(fn, _MARK, False):
        return fn

    @functools.wraps(fn)
    def wrapper(module, query, key, value, attention_mask, *args, **kwargs):
        cu = kwargs.get("cu_seq_lens_q")
        nnz = query.shape[2]
        if (
            cu is None
            or not getattr(module, "is_causal", True)
            or args
            or query.shape[0] != 1
            or key.shape[2] != nnz
            or kwargs.get("sliding_window") is not None
            or int(cu[-1]) != nnz
        ):
            return fn(module, query, key, value, attention_mask, *args, **kwargs)
        for name in (*VARLEN_KWARGS, "position_ids", "is_causal"):
            kwargs.pop(name, None)
        outputs = []
        for start, count, length in _runs(cu.tolist()):
            q, k, v = (_as_batch(t, start, count, length) for t in (query, key, value))
            out, _ = fn(module, q, k, v, None, is_causal=True, **kwargs)  # (count, length, heads, d_v)
            outputs.append(out.reshape(1, count * length, *out.shape[2:]))
        return (outputs[0] if len(outputs) == 1 else torch.cat(outputs, dim=1)), None

    setattr(wrapper, _MARK, True)
    return wrapper


def install() -> None:
    """Wrap transformers' registered ``sdpa`` function with :func:`per_sequence` (once per process)."""
    from transformers import AttentionInterface

    fn = AttentionInterface._global_mapping.get("sdpa")
    if fn is not None and not getattr(fn, _MARK, False):
        AttentionInterface.register("sdpa", per_sequence(fn))
