"""Micro batches of a ``DataProto``: by row count or by token budget (dynamic batch size), the order restored after.

Backend-free: the engines split the batches they are given with it, and the role logic on top of them (the PPO actor
and critic loops, recipes) uses the same helpers for gradient accumulation and metric lists.
"""

from __future__ import annotations

import itertools

import numpy as np
import torch

from verl.protocol import DataProto
from verl.utils.seqlen_balancing import get_reverse_idx, rearrange_micro_batches

__all__ = [
    "append_metrics",
    "gradient_accumulation_steps",
    "make_micro_batches",
    "restore_order",
    "to_device",
    "to_float",
]


def make_micro_batches(
    data: DataProto,
    select_keys: list[str],
    micro_batch_size: int | None,
    use_dynamic_bsz: bool,
    max_token_len: int | None = None,
) -> tuple[list[dict], list[list[int]] | None]:
    """Split ``data`` into micro batches (dicts of tensors, plus ``multi_modal_inputs`` when present).

    Static: consecutive chunks of ``micro_batch_size`` rows. Dynamic: token-budget micro batches of at most
    ``max_token_len`` valid tokens (``rearrange_micro_batches``); the second return value then lists each micro
    batch's row indices so the caller can restore the order with :func:`restore_order`, else it is None.
    """
    batch = data.select(batch_keys=select_keys).batch
    if use_dynamic_bsz:
        if max_token_len is None:
            raise ValueError("use_dynamic_bsz=True needs max_token_len (the *_max_token_len_per_gpu setting)")
        tds, partitions = rearrange_micro_batches(batch=batch, max_token_len=max_token_len)
    else:
        if not micro_batch_size or micro_batch_size <= 0:
            raise ValueError(
                f"micro_batch_size={micro_batch_size!r}: expected a positive int (*_micro_batch_size_per_gpu)"
            )
        tds = batch.split(micro_batch_size)
        starts = range(0, len(data), micro_batch_size)
        partitions = [list(range(s, min(s + micro_batch_size, len(data)))) for s in starts]
    micro_batches = [dict(td.items()) for td in tds]
    mm = data.non_tensor_batch.get("multi_modal_inputs") if data.non_tensor_batch else None
    if mm is not None:
        for mb, rows in zip(micro_batches, partitions):
            mb["multi_modal_inputs"] = mm[np.asarray(rows, dtype=np.int64)]
    return micro_batches, (partitions if use_dynamic_bsz else None)


def gradient_accumulation_steps(mini_batch_size: int, micro_batch_size: int | None, section: str) -> int:
    """``mini // micro`` for static micro-batching; the loss of each micro batch is divided by it, so a
    non-divisible pair would silently mis-scale the gradient (verl's worker asserts the same)."""
    if not micro_batch_size or micro_batch_size <= 0 or mini_batch_size % micro_batch_size != 0:
        raise ValueError(
            f"{section}.ppo_mini_batch_size={mini_batch_size} (per GPU) must be a positive multiple of "
            f"{section}.ppo_micro_batch_size_per_gpu={micro_batch_size}"
        )
    return mini_batch_size // micro_batch_size


def restore_order(tensor: torch.Tensor, partitions: list[list[int]] | None) -> torch.Tensor:
    """Undo the dynamic-batching permutation of a concatenated result (identity when ``partitions`` is None)."""
    if partitions is None:
        return tensor
    order = list(itertools.chain.from_iterable(partitions))
    return tensor[torch.tensor(get_reverse_idx(order), dtype=torch.long, device=tensor.device)]


def to_device(micro_batch: dict, device) -> dict:
    """Move the tensors of a micro batch to ``device`` (non-tensors untouched)."""
    return {k: (v.to(device) if isinstance(v, torch.Tensor) else v) for k, v in micro_batch.items()}


def append_metrics(metrics: dict[str, list], new: dict[str, float]) -> None:
    """Append each value of ``new`` to the list under the same key in ``metrics``."""
    for key, value in new.items():
        metrics.setdefault(key, []).append(value)


def to_float(x) -> float:
    """A python float from a 0-d tensor or a number."""
    return x.detach().item() if isinstance(x, torch.Tensor) else float(x)
