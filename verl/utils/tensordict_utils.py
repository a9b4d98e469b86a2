"""Helpers over TensorDict batches that carry Python values next to their tensors (verl head's path).

A batch is one TensorDict with batch dim 0. A per-sample Python value (a prompt string, a dict of tool kwargs) is a
non-tensor stack with one entry per sample, and follows the rows when the batch is indexed, chunked or concatenated.
A batch-level value (a temperature, a step number) is one non-tensor entry shared by every sample, like
``DataProto.meta_info``.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np
import torch
from tensordict import NonTensorData, NonTensorStack, TensorDict

__all__ = [
    "assign_non_tensor",
    "batch_level_values",
    "chunk_tensordict",
    "concat_tensordict",
    "get_tensordict",
    "index_select_tensor_dict",
]


def get_tensordict(tensor_dict: dict[str, torch.Tensor], non_tensor_dict: dict[str, Any] | None = None) -> TensorDict:
    """A batch of ``tensor_dict`` (every tensor ``(bs, ...)``) and ``non_tensor_dict``.

    A list, tuple or 1-D numpy array of length ``bs`` in ``non_tensor_dict`` becomes a per-sample value; anything
    else is a batch-level value.
    """
    sizes = {key: tensor.shape[0] for key, tensor in tensor_dict.items()}
    if len(set(sizes.values())) != 1:
        raise ValueError(f"get_tensordict: tensors must share their first (batch) dim, got {sizes}")
    batch_size = next(iter(sizes.values()))
    td = TensorDict(dict(tensor_dict), batch_size=[batch_size])
    for key, value in (non_tensor_dict or {}).items():
        if isinstance(value, list | tuple) or (isinstance(value, np.ndarray) and value.ndim == 1):
            if len(value) != batch_size:
                raise ValueError(f"get_tensordict: non-tensor '{key}' has {len(value)} entries for {batch_size} rows")
            td[key] = NonTensorStack.from_list(list(value))
        else:
            td[key] = NonTensorData(value)
    return td


def assign_non_tensor(td: TensorDict, **values: Any) -> TensorDict:
    """Set batch-level values on ``td`` in place (``assign_non_tensor(td, temperature=0.7)``); returns ``td``."""
    for key, value in values.items():
        td[key] = NonTensorData(value)
    return td


def batch_level_values(td: TensorDict) -> dict[str, Any]:
    """The batch-level (shared, not per-sample) values of ``td`` by key."""
    return {key: value.data for key, value in td.items() if isinstance(value, NonTensorData)}


def index_select_tensor_dict(td: TensorDict, indices: torch.Tensor | np.ndarray | Sequence[int]) -> TensorDict:
    """The rows ``indices`` of ``td`` (tensors and per-sample values alike), in that order."""
    if not isinstance(indices, torch.Tensor):
        indices = torch.as_tensor(np.asarray(indices), dtype=torch.long)
    return td[indices]


def chunk_tensordict(td: TensorDict, chunks: int) -> list[TensorDict]:
    """Split ``td`` into ``chunks`` consecutive batches of equal size (the batch size must divide evenly)."""
    batch_size = td.batch_size[0]
    if chunks <= 0 or batch_size % chunks:
        raise ValueError(f"chunk_tensordict: a batch of {batch_size} rows does not split into {chunks} equal chunks")
    step = batch_size // chunks
    return [td[i : i + step] for i in range(0, batch_size, step)]


def concat_tensordict(data: Sequence[TensorDict]) -> TensorDict:
    """Concatenate batches along dim 0; per-sample values follow their rows, batch-level values must agree."""
    if not data:
        raise ValueError("concat_tensordict: nothing to concatenate")
    first = batch_level_values(data[0])
    for other in data[1:]:
        values = batch_level_values(other)
        for key in first.keys() | values.keys():
            if key not in first or key not in values or first[key] != values[key]:
                raise ValueError(
                    f"concat_tensordict: batch-level value '{key}' differs between batches: "
                    f"{first.get(key)!r} vs {values.get(key)!r}"
                )
    return torch.cat(list(data), dim=0)
