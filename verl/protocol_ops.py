"""Operations on DataProto batches that live outside the class: merging dicts of tensors / arrays, folding the
batch dimension, and all-gathering a batch across a process group. Re-exported by :mod:`verl.protocol`."""

from __future__ import annotations

import math
from typing import TYPE_CHECKING

import numpy as np
import torch
from tensordict import TensorDict

from verl.utils.device import get_device_id, get_torch_device, is_accelerator_available

if TYPE_CHECKING:
    from verl.protocol import DataProto

__all__ = ["all_gather_data_proto", "fold_batch_dim", "unfold_batch_dim", "union_numpy_dict", "union_tensor_dict"]


def union_tensor_dict(tensor_dict1: TensorDict, tensor_dict2: TensorDict) -> TensorDict:
    """Add the keys of ``tensor_dict2`` to ``tensor_dict1`` (in place); shared keys must hold equal tensors."""
    assert tensor_dict1.batch_size == tensor_dict2.batch_size, (
        f"union_tensor_dict: batch sizes differ: {tensor_dict1.batch_size} vs {tensor_dict2.batch_size}"
    )
    for key in tensor_dict2.keys():
        if key not in tensor_dict1.keys():
            tensor_dict1[key] = tensor_dict2[key]
        else:
            assert tensor_dict1[key].equal(tensor_dict2[key]), (
                f"union_tensor_dict: key '{key}' exists in both with different values"
            )
    return tensor_dict1


def _arrays_equal(a: np.ndarray, b: np.ndarray) -> bool:
    """Element-wise equality that treats NaN as equal to NaN and works on object arrays."""
    if a.shape != b.shape:
        return False
    if a.dtype != object and b.dtype != object:
        return bool(np.array_equal(a, b, equal_nan=a.dtype.kind in "fc" and b.dtype.kind in "fc"))
    for x, y in zip(a.ravel(), b.ravel()):
        if isinstance(x, float) and isinstance(y, float) and math.isnan(x) and math.isnan(y):
            continue
        if isinstance(x, np.ndarray) or isinstance(y, np.ndarray):
            if not (isinstance(x, np.ndarray) and isinstance(y, np.ndarray) and _arrays_equal(x, y)):
                return False
            continue
        try:
            same = x == y
            if not isinstance(same, bool | np.bool_):
                same = bool(np.all(same))
        except Exception:
            return False
        if not same:
            return False
    return True


def union_numpy_dict(tensor_dict1: dict[str, np.ndarray], tensor_dict2: dict[str, np.ndarray]) -> dict:
    """Merge ``tensor_dict2`` into ``tensor_dict1`` (in place); shared keys must hold equal arrays."""
    for key, val in tensor_dict2.items():
        if key in tensor_dict1:
            assert isinstance(tensor_dict1[key], np.ndarray) and isinstance(val, np.ndarray), (
                f"union_numpy_dict: key '{key}' must be a numpy array on both sides"
            )
            assert _arrays_equal(tensor_dict1[key], val), (
                f"union_numpy_dict: key '{key}' exists in both with different values"
            )
        tensor_dict1[key] = val
    return tensor_dict1


def fold_batch_dim(data: DataProto, new_batch_size: int) -> DataProto:
    """Reshape a batch of ``B`` rows into ``new_batch_size`` rows of ``B // new_batch_size`` samples each."""
    batch_size = data.batch.batch_size[0]
    assert batch_size % new_batch_size == 0, (
        f"fold_batch_dim: batch size {batch_size} is not divisible by new_batch_size {new_batch_size}"
    )
    tensors = data.batch.view(new_batch_size, -1)
    tensors.auto_batch_size_(batch_dims=1)
    non_tensor = {k: v.reshape(new_batch_size, -1, *v.shape[1:]) for k, v in data.non_tensor_batch.items()}
    return type(data)(batch=tensors, non_tensor_batch=non_tensor, meta_info=data.meta_info)


def unfold_batch_dim(data: DataProto, batch_dims: int = 2) -> DataProto:
    """Inverse of :func:`fold_batch_dim`: flatten the first ``batch_dims`` dims into one batch dim."""
    tensors = data.batch
    tensors.auto_batch_size_(batch_dims=batch_dims)
    tensors = tensors.view(-1)
    batch_size = tensors.batch_size[0]
    non_tensor = {k: v.reshape(batch_size, *v.shape[batch_dims:]) for k, v in data.non_tensor_batch.items()}
    return type(data)(batch=tensors, non_tensor_batch=non_tensor, meta_info=data.meta_info)


def all_gather_data_proto(data: DataProto, process_group) -> None:
    """All-gather ``data`` across ``process_group`` in place (rank order), tensors and non-tensors."""
    import torch.distributed as dist

    group_size = dist.get_world_size(group=process_group)
    prev_device = data.batch.device
    data.batch = data.batch.to(get_device_id() if is_accelerator_available() else "cpu")
    gathered = {}
    for key in sorted(data.batch.keys()):
        tensor = data.batch[key].contiguous()
        out = [torch.empty_like(tensor) for _ in range(group_size)]
        dist.all_gather(out, tensor, group=process_group)
        gathered[key] = torch.cat(out, dim=0)
    data.batch = TensorDict(gathered, batch_size=(len(data) * group_size,)).to(prev_device)
    objects = [None] * group_size
    dist.all_gather_object(objects, data.non_tensor_batch, group=process_group)
    data.non_tensor_batch = {k: np.concatenate([o[k] for o in objects]) for k in data.non_tensor_batch}
    if is_accelerator_available():
        get_torch_device().empty_cache()
