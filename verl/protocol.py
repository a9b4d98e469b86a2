"""DataProto: the batch container passed between the single controller and its worker groups.

A DataProto holds three things that share one batch dimension (dim 0):

* ``batch``: a ``TensorDict`` of tensors,
* ``non_tensor_batch``: a dict of numpy arrays (usually ``dtype=object``) for per-sample Python values,
* ``meta_info``: a plain dict of batch-level values (temperature, eos id, metrics, ...).
"""

from __future__ import annotations

import contextlib
import copy
import logging
import math
import os
import pickle
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import torch
from tensordict import TensorDict
from torch.utils.data import DataLoader

from verl.utils.device import get_device_id, get_torch_device, is_accelerator_available
from verl.utils.py_functional import list_of_dict_to_dict_of_list, union_two_dict  # noqa: F401  (verl.protocol name)

__all__ = ["DataProto", "union_tensor_dict"]

logger = logging.getLogger(__name__)

with contextlib.suppress(Exception):
    import tensordict

    tensordict.set_lazy_legacy(False).set()

# kwarg name under which DP_COMPUTE_PROTO dispatch passes the number of padding rows it appended
_padding_size_key = "_padding_size_key_x123d"


# ---- merging and folding batches ----


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


# ---- transport: how tensors travel between processes (Ray, pickle, disk) ----
#
# Tensors travel as numpy arrays: pickle protocol 5 (Ray's transport) sends those as out-of-band buffers without
# copying, which is several times faster than ``torch.save``-ing the TensorDict into bytes.

# numpy lacks some torch dtypes (bfloat16, float8): those travel as same-width integers and are viewed back.
_NUMPY_CARRIER = {
    torch.bfloat16: torch.int16,
    torch.float8_e4m3fn: torch.uint8,
    torch.float8_e5m2: torch.uint8,
}


def _pack_tensordict(batch: TensorDict | None):
    """Turn a TensorDict into plain numpy arrays (plus dtype names) that pickle sends without copying."""
    if batch is None:
        return None
    arrays = {}
    for key, tensor in batch.items(include_nested=True, leaves_only=True):
        tensor = tensor.detach().cpu().contiguous()
        carrier = _NUMPY_CARRIER.get(tensor.dtype)
        arrays[key] = (str(tensor.dtype), (tensor.view(carrier) if carrier else tensor).numpy())
    device = str(batch.device) if batch.device is not None else None
    return {"format": "numpy-v1", "batch_size": tuple(batch.batch_size), "device": device, "arrays": arrays}


def _unpack_tensordict(packed) -> TensorDict | None:
    """Inverse of :func:`_pack_tensordict`; also reads the older ``torch.save`` bytes format."""
    if packed is None:
        return None
    if isinstance(packed, bytes):  # written by the torch.save format
        import io

        location = None if is_accelerator_available() else "cpu"
        return torch.load(io.BytesIO(packed), weights_only=False, map_location=location)
    source = {}
    for key, (dtype_name, array) in packed["arrays"].items():
        if not array.flags.writeable:  # zero-copy views of Ray's shared store are read-only; workers write in place
            array = array.copy()
        tensor = torch.from_numpy(array)
        dtype = getattr(torch, dtype_name.removeprefix("torch."))
        source[key] = tensor.view(dtype) if dtype in _NUMPY_CARRIER else tensor
    device = packed["device"]
    if device is not None and device != "cpu" and not is_accelerator_available():
        device = None  # saved on an accelerator, loaded on a CPU-only machine
    batch = TensorDict(batch_size=packed["batch_size"], device=device)
    for key, tensor in source.items():
        batch[key] = tensor
    return batch


class _DataProtoConfigMeta(type):
    """Holds the process-wide auto-padding switch as a class-level property."""

    _config: dict[str, Any] = {}
    auto_padding_key = "_verl_auto_padding"

    @property
    def auto_padding(cls) -> bool:
        enabled_by_env = os.getenv("VERL_AUTO_PADDING", "FALSE").upper() in ("TRUE", "1")
        return enabled_by_env or cls._config.get(cls.auto_padding_key, False)

    @auto_padding.setter
    def auto_padding(cls, enabled: bool):
        assert isinstance(enabled, bool), f"DataProtoConfig.auto_padding must be a bool, got {type(enabled).__name__}"
        cls._config[cls.auto_padding_key] = enabled


class DataProtoConfig(metaclass=_DataProtoConfigMeta):
    """Global switches for DataProto (``DataProtoConfig.auto_padding = True``)."""


def pad_dataproto_to_divisor(data: DataProto, size_divisor: int) -> tuple[DataProto, int]:
    """Append rows taken cyclically from the start of ``data`` until ``len(data) % size_divisor == 0``.

    Returns ``(padded, pad_size)``; the input is returned unchanged when no padding is needed.
    """
    assert isinstance(data, DataProto), f"pad_dataproto_to_divisor expects a DataProto, got {type(data).__name__}"
    assert size_divisor > 0, f"size_divisor must be positive, got {size_divisor}"
    if len(data) % size_divisor == 0:
        if len(data) == 0:
            logger.warning("pad_dataproto_to_divisor called on an empty DataProto")
        return data, 0
    pad_size = size_divisor - len(data) % size_divisor
    pieces = []
    remaining = pad_size
    while remaining > 0:
        take = min(remaining, len(data))
        pieces.append(data[:take])
        remaining -= take
    return DataProto.concat([data, *pieces]), pad_size


def unpad_dataproto(data: DataProto, pad_size: int) -> DataProto:
    """Drop the last ``pad_size`` rows added by :func:`pad_dataproto_to_divisor`."""
    return data[:-pad_size] if pad_size != 0 else data


def collate_fn(x: list[DataProtoItem]) -> DataProto:
    """Stack DataProtoItems (e.g. from a DataLoader over a DataProto) back into one DataProto."""
    batch = torch.stack([item.batch for item in x]).contiguous() if x[0].batch is not None else None
    non_tensor: dict[str, list] = {}
    for item in x:
        for key, val in item.non_tensor_batch.items():
            non_tensor.setdefault(key, []).append(val)
    non_tensor_batch = {key: np.array(vals, dtype=object) for key, vals in non_tensor.items()}
    return DataProto(batch=batch, non_tensor_batch=non_tensor_batch)


@dataclass
class DataProtoItem:
    """One row of a DataProto (from integer indexing)."""

    batch: TensorDict | None = None
    non_tensor_batch: dict = field(default_factory=dict)
    meta_info: dict = field(default_factory=dict)


def _td_nbytes(td: TensorDict) -> int:
    return sum(t.element_size() * t.numel() for t in td.values())


@dataclass
class DataProto:
    """A batch of tensors, per-sample numpy values and batch-level metadata sharing dim 0.

    All tensors in ``batch`` share the first dimension; every ``non_tensor_batch`` array has the same length.
    """

    batch: TensorDict | None = None
    non_tensor_batch: dict = field(default_factory=dict)
    meta_info: dict = field(default_factory=dict)

    def __post_init__(self):
        self.check_consistency()

    # ------------------------------------------------------------------ basics
    def __len__(self) -> int:
        if self.batch is not None:
            return self.batch.batch_size[0]
        if self.non_tensor_batch:
            return next(iter(self.non_tensor_batch.values())).shape[0]
        return 0

    def check_consistency(self) -> None:
        """Assert one batch dim, numpy non-tensor values, and equal lengths everywhere."""
        if self.batch is not None:
            assert len(self.batch.batch_size) == 1, (
                f"DataProto only support num_batch_dims=1, got batch_size {tuple(self.batch.batch_size)}"
            )
        if self.non_tensor_batch is not None:
            for key, val in self.non_tensor_batch.items():
                assert isinstance(val, np.ndarray), (
                    f"non_tensor_batch['{key}'] must be a numpy array, got {type(val).__name__}"
                )
        if self.batch is not None and self.non_tensor_batch:
            batch_size = self.batch.batch_size[0]
            for key, val in self.non_tensor_batch.items():
                assert val.shape[0] == batch_size, (
                    f"non_tensor_batch['{key}'] has length {val.shape[0]}, expected batch size {batch_size}"
                )

    def __getitem__(self, item):
        if isinstance(item, slice):
            return self.slice(item.start, item.stop, item.step)
        if isinstance(item, list | np.ndarray | torch.Tensor):
            return self.select_idxs(item)
        if isinstance(item, int | np.integer):
            tensor_row = self.batch[item] if self.batch is not None else None
            non_tensor_row = {key: val[item] for key, val in self.non_tensor_batch.items()}
            return DataProtoItem(batch=tensor_row, non_tensor_batch=non_tensor_row, meta_info=self.meta_info)
        raise TypeError(f"DataProto indices must be int, slice, list, np.ndarray or torch.Tensor, got {type(item)}")

    def __getstate__(self):
        return _pack_tensordict(self.batch), self.non_tensor_batch, self.meta_info

    def __setstate__(self, state):
        packed, self.non_tensor_batch, self.meta_info = state
        self.batch = _unpack_tensordict(packed)

    def save_to_disk(self, filepath: str) -> None:
        """Pickle this DataProto to ``filepath``."""
        with open(filepath, "wb") as f:
            pickle.dump(self, f)

    @staticmethod
    def load_from_disk(filepath: str) -> DataProto:
        """Load a DataProto written by :meth:`save_to_disk`."""
        with open(filepath, "rb") as f:
            return pickle.load(f)

    def print_size(self, prefix: str = "") -> None:
        """Print the memory held by the tensors and the non-tensor arrays, in GB."""
        tensor_gb = _td_nbytes(self.batch) / 1024**3 if self.batch is not None else 0.0
        non_tensor_gb = sum(v.nbytes for v in self.non_tensor_batch.values()) / 1024**3
        message = f"Size of tensordict: {tensor_gb} GB, size of non_tensor_batch: {non_tensor_gb} GB"
        print(f"{prefix}, {message}" if prefix else message)

    # ------------------------------------------------------------- construction
    @classmethod
    def from_single_dict(cls, data: dict, meta_info: dict | None = None, auto_padding: bool = False) -> DataProto:
        """Build from one dict, sorting tensors into ``batch`` and numpy arrays into ``non_tensor_batch``."""
        tensors, non_tensors = {}, {}
        for key, val in data.items():
            if isinstance(val, torch.Tensor):
                tensors[key] = val
            elif isinstance(val, np.ndarray):
                non_tensors[key] = val
            else:
                raise ValueError(f"Unsupported type in data for key '{key}': {type(val).__name__}")
        return cls.from_dict(tensors=tensors, non_tensors=non_tensors, meta_info=meta_info, auto_padding=auto_padding)

    @classmethod
    def from_dict(
        cls,
        tensors: dict[str, torch.Tensor] | None = None,
        non_tensors: dict | None = None,
        meta_info: dict | None = None,
        num_batch_dims: int = 1,
        auto_padding: bool = False,
    ) -> DataProto:
        """Build from a dict of tensors sharing their leading ``num_batch_dims`` dims, plus non-tensors and meta."""
        assert num_batch_dims > 0, f"num_batch_dims must be positive, got {num_batch_dims}"
        if non_tensors is not None:
            assert num_batch_dims == 1, "non_tensors are only supported with num_batch_dims=1"
        tensors = {} if tensors is None else tensors
        non_tensors = {} if non_tensors is None else non_tensors
        meta_info = {} if meta_info is None else meta_info
        assert isinstance(non_tensors, dict), f"non_tensors must be a dict, got {type(non_tensors).__name__}"

        batch_size, pivot_key = None, None
        for key, tensor in tensors.items():
            leading = tuple(tensor.shape[:num_batch_dims])
            if batch_size is None:
                batch_size, pivot_key = leading, key
            else:
                assert leading == batch_size, (
                    f"Not all tensors share batch size: '{pivot_key}' has {batch_size}, '{key}' has {leading}"
                )
        for key, val in non_tensors.items():
            if not isinstance(val, np.ndarray):
                non_tensors[key] = np.array(val, dtype=object)

        batch = TensorDict(source=tensors, batch_size=batch_size) if tensors else None
        if auto_padding:
            meta_info[DataProtoConfig.auto_padding_key] = True
        return cls(batch=batch, non_tensor_batch=non_tensors, meta_info=meta_info)

    # ---------------------------------------------------------------- indexing
    def select_idxs(self, idxs) -> DataProto:
        """Rows picked by an index list/array/tensor or a boolean mask."""
        if isinstance(idxs, list):
            idxs = torch.tensor(idxs)
            if idxs.dtype != torch.bool:
                idxs = idxs.type(torch.int32)
        if isinstance(idxs, np.ndarray):
            idxs_np, idxs_torch = idxs, torch.from_numpy(idxs)
        else:
            idxs_torch, idxs_np = idxs, idxs.detach().cpu().numpy()
        size = int(idxs_np.sum()) if idxs_np.dtype == bool else len(idxs_np)

        batch = None
        if self.batch is not None:
            index = idxs_torch.to(self.batch.device) if self.batch.device is not None else idxs_torch
            batch = TensorDict(
                source={key: tensor[index] for key, tensor in self.batch.items()},
                batch_size=(size,),
                device=self.batch.device,
            )
        non_tensor = {key: val[idxs_np] for key, val in self.non_tensor_batch.items()}
        return type(self)(batch=batch, non_tensor_batch=non_tensor, meta_info=self.meta_info)

    def slice(self, start: int | None = None, end: int | None = None, step: int | None = None) -> DataProto:
        """Rows ``start:end:step`` (meta_info shared with self)."""
        sl = slice(start, end, step)
        batch = self.batch[sl] if self.batch is not None else None
        non_tensor = {key: val[sl] for key, val in self.non_tensor_batch.items()}
        return type(self)(batch=batch, non_tensor_batch=non_tensor, meta_info=self.meta_info)

    # -------------------------------------------------------------- key level
    def select(
        self,
        batch_keys: list[str] | None = None,
        non_tensor_batch_keys: list[str] | None = None,
        meta_info_keys: list[str] | None = None,
        deepcopy: bool = False,
    ) -> DataProto:
        """A DataProto with only the named keys; unknown non-tensor/meta names are ignored."""
        batch = self.batch
        if batch_keys is not None and batch is not None:
            batch = batch.select(*batch_keys)
        non_tensor = self.non_tensor_batch
        if non_tensor_batch_keys is not None:
            non_tensor = {k: v for k, v in non_tensor.items() if k in non_tensor_batch_keys}
        meta = self.meta_info
        if meta_info_keys is not None:
            meta = {k: v for k, v in meta.items() if k in meta_info_keys}
        if deepcopy:
            non_tensor, meta = copy.deepcopy(non_tensor), copy.deepcopy(meta)
        return type(self)(batch=batch, non_tensor_batch=non_tensor, meta_info=meta)

    def pop(
        self,
        batch_keys: list[str] | None = None,
        non_tensor_batch_keys: list[str] | None = None,
        meta_info_keys: list[str] | None = None,
    ) -> DataProto:
        """Remove the named keys from self and return them as a new DataProto."""
        batch_keys = batch_keys or []
        non_tensor_batch_keys = non_tensor_batch_keys or []
        meta_info_keys = meta_info_keys or []
        tensors = {}
        for key in batch_keys:
            assert self.batch is not None and key in self.batch.keys(), f"pop: tensor key '{key}' not in batch"
            tensors[key] = self.batch.pop(key)
        non_tensors = {}
        for key in non_tensor_batch_keys:
            assert key in self.non_tensor_batch, f"pop: non-tensor key '{key}' not in non_tensor_batch"
            non_tensors[key] = self.non_tensor_batch.pop(key)
        meta = {}
        for key in meta_info_keys:
            assert key in self.meta_info, f"pop: meta key '{key}' not in meta_info"
            meta[key] = self.meta_info.pop(key)
        return DataProto.from_dict(tensors=tensors, non_tensors=non_tensors, meta_info=meta)

    def rename(self, old_keys: str | list[str] | None = None, new_keys: str | list[str] | None = None) -> DataProto:
        """Rename tensor keys in place; returns self."""

        def as_list(keys, name):
            if isinstance(keys, str):
                return [keys]
            if isinstance(keys, list):
                return keys
            raise TypeError(f"rename: {name} must be a str or a list of str, got {type(keys).__name__}")

        old_keys, new_keys = as_list(old_keys, "old_keys"), as_list(new_keys, "new_keys")
        if len(old_keys) != len(new_keys):
            raise ValueError(f"rename: {len(old_keys)} old keys but {len(new_keys)} new keys")
        self.batch.rename_key_(tuple(old_keys), tuple(new_keys))
        return self

    def union(self, other: DataProto) -> DataProto:
        """Merge ``other`` into self (in place); conflicting values for a shared key raise AssertionError."""
        if self.batch is None:
            self.batch = other.batch
        elif other.batch is not None:
            self.batch = union_tensor_dict(self.batch, other.batch)
        self.non_tensor_batch = union_numpy_dict(self.non_tensor_batch, other.non_tensor_batch)
        self.meta_info = union_two_dict(self.meta_info, other.meta_info)
        return self

    def to(self, device) -> DataProto:
        """Move the tensors to ``device`` (in place); returns self."""
        if self.batch is not None:
            self.batch = self.batch.to(device)
        return self

    # ------------------------------------------------------------ batch level
    def chunk(self, chunks: int) -> list[DataProto]:
        """Split into ``chunks`` pieces along dim 0 (equal unless auto-padding is enabled)."""
        if not self.is_padding_enabled():
            assert len(self) % chunks == 0, (
                f"only support equal chunk: batch of {len(self)} rows cannot be split into {chunks} chunks"
            )
        if self.batch is not None:
            batch_chunks = list(self.batch.chunk(chunks=chunks, dim=0))
            bounds = np.cumsum([len(c) for c in batch_chunks])[:-1]
        else:
            batch_chunks = [None] * chunks
            bounds = None
        non_tensor_chunks: list[dict] = [{} for _ in range(chunks)]
        for key, val in self.non_tensor_batch.items():
            parts = np.array_split(val, bounds if bounds is not None else chunks)
            assert len(parts) == chunks, f"chunk: non-tensor key '{key}' split into {len(parts)} parts, not {chunks}"
            for i, part in enumerate(parts):
                non_tensor_chunks[i][key] = part
        assert len(batch_chunks) == chunks, f"chunk: batch of {len(self)} rows gives fewer than {chunks} chunks"
        return [
            type(self)(batch=batch_chunks[i], non_tensor_batch=non_tensor_chunks[i], meta_info=self.meta_info)
            for i in range(chunks)
        ]

    @staticmethod
    def concat(data: list[DataProto]) -> DataProto:
        """Concatenate along dim 0; meta_info is taken from the first element."""
        assert len(data) > 0, "DataProto.concat needs at least one DataProto"
        batch = torch.cat([d.batch for d in data], dim=0) if data[0].batch is not None else None
        keys = list(data[0].non_tensor_batch.keys())
        for d in data[1:]:
            extra = set(d.non_tensor_batch) - set(keys)
            assert not extra, f"DataProto.concat: non-tensor keys {sorted(extra)} absent from the first element"
        non_tensor = {key: np.concatenate([d.non_tensor_batch[key] for d in data], axis=0) for key in keys}
        return type(data[0])(batch=batch, non_tensor_batch=non_tensor, meta_info=data[0].meta_info)

    def reorder(self, indices: torch.Tensor) -> None:
        """Permute rows in place by ``indices`` (1-D long tensor)."""
        indices_np = indices.detach().cpu().numpy()
        if self.batch is not None:
            self.batch = self.batch[indices]
        self.non_tensor_batch = {key: val[indices_np] for key, val in self.non_tensor_batch.items()}

    def repeat(self, repeat_times: int = 2, interleave: bool = True) -> DataProto:
        """Repeat every row (``interleave=True``: a,a,b,b) or the whole batch (a,b,a,b)."""
        batch = None
        if self.batch is not None:
            if interleave:
                source = {k: t.repeat_interleave(repeat_times, dim=0) for k, t in self.batch.items()}
            else:
                source = {k: t.repeat(repeat_times, *[1] * (t.dim() - 1)) for k, t in self.batch.items()}
            batch = TensorDict(source, batch_size=(len(self) * repeat_times,), device=self.batch.device)
        non_tensor = {}
        for key, val in self.non_tensor_batch.items():
            if interleave:
                non_tensor[key] = np.repeat(val, repeat_times, axis=0)
            else:
                non_tensor[key] = np.tile(val, (repeat_times,) + (1,) * (val.ndim - 1))
        return type(self)(batch=batch, non_tensor_batch=non_tensor, meta_info=self.meta_info)

    def sample_level_repeat(self, repeat_times) -> DataProto:
        """Repeat row ``i`` ``repeat_times[i]`` times, consecutively."""
        if isinstance(repeat_times, tuple):
            repeat_times = list(repeat_times)
        elif isinstance(repeat_times, torch.Tensor):
            assert repeat_times.dim() == 1, f"repeat_times must be 1-D, got shape {tuple(repeat_times.shape)}"
            repeat_times = repeat_times.tolist()
        elif isinstance(repeat_times, np.ndarray):
            assert repeat_times.ndim == 1, f"repeat_times must be 1-D, got shape {repeat_times.shape}"
            repeat_times = repeat_times.tolist()
        else:
            assert isinstance(repeat_times, list), (
                f"repeat_times must be a list, tuple, 1-D tensor or 1-D ndarray, got {type(repeat_times).__name__}"
            )
        assert len(repeat_times) == len(self), f"repeat_times has {len(repeat_times)} entries for {len(self)} rows"
        counts = torch.tensor(repeat_times, dtype=torch.long)
        batch = None
        if self.batch is not None:
            source = {k: t.repeat_interleave(counts.to(t.device), dim=0) for k, t in self.batch.items()}
            batch = TensorDict(source, batch_size=(int(counts.sum()),), device=self.batch.device)
        non_tensor = {key: np.repeat(val, repeat_times, axis=0) for key, val in self.non_tensor_batch.items()}
        return type(self)(batch=batch, non_tensor_batch=non_tensor, meta_info=self.meta_info)

    def unfold_column_chunks(self, n_split: int, split_keys: list[str] | None = None) -> DataProto:
        """Turn ``[B, C, ...]`` values of ``split_keys`` into ``[B*n_split, C//n_split, ...]``; repeat the others."""
        split_keys = split_keys or []

        def unfold(key, val, repeat_fn):
            if key in split_keys:
                assert val.shape[1] % n_split == 0, (
                    f"unfold_column_chunks: key '{key}' has {val.shape[1]} columns, not divisible by {n_split}"
                )
                return val.reshape(val.shape[0] * n_split, val.shape[1] // n_split, *val.shape[2:])
            return repeat_fn(val)

        batch = None
        if self.batch is not None:
            source = {k: unfold(k, t, lambda v: v.repeat_interleave(n_split, dim=0)) for k, t in self.batch.items()}
            batch = TensorDict(source, batch_size=(len(self) * n_split,), device=self.batch.device)
        non_tensor = {
            k: unfold(k, v, lambda a: np.repeat(a, n_split, axis=0)) for k, v in self.non_tensor_batch.items()
        }
        return type(self)(batch=batch, non_tensor_batch=non_tensor, meta_info=self.meta_info)

    def split(self, split_size: int) -> list[DataProto]:
        """Consecutive pieces of ``split_size`` rows (the last may be shorter)."""
        assert split_size > 0, f"split_size must be positive, got {split_size}"
        return [self[i : i + split_size] for i in range(0, len(self), split_size)]

    def make_iterator(
        self, mini_batch_size: int, epochs: int, seed: int | None = None, dataloader_kwargs: dict | None = None
    ) -> Iterator[DataProto]:
        """Iterate ``epochs`` passes of mini-batches of ``mini_batch_size`` rows (shuffled if asked, seeded)."""
        assert self.batch.batch_size[0] % mini_batch_size == 0, (
            f"make_iterator: batch size {self.batch.batch_size[0]} is not divisible by mini_batch_size "
            f"{mini_batch_size}"
        )
        generator = None
        if seed is not None:
            generator = torch.Generator()
            generator.manual_seed(seed)
        loader = DataLoader(
            dataset=self,
            batch_size=mini_batch_size,
            collate_fn=collate_fn,
            generator=generator,
            **(dataloader_kwargs or {}),
        )

        def iterate():
            for _ in range(epochs):
                for mini_batch in loader:
                    mini_batch.meta_info = self.meta_info
                    yield mini_batch

        return iter(iterate())

    # ----------------------------------------------------------------- padding
    def is_padding_enabled(self) -> bool:
        """True when this object or the global DataProtoConfig asks for auto-padding."""
        return bool(self.meta_info.get(DataProtoConfig.auto_padding_key, False)) or DataProtoConfig.auto_padding

    def padding(self, padding_size: int, padding_candidate: str = "") -> None:
        """Append ``padding_size`` copies of the first (``"first"``) or last row, in place."""
        if padding_size == 0:
            return
        row = self.select_idxs([0 if padding_candidate == "first" else len(self) - 1])
        padded = DataProto.concat([self] + [row] * padding_size)
        self.batch = padded.batch
        self.non_tensor_batch = padded.non_tensor_batch


@dataclass
class DataProtoFuture:
    """A lazy handle on the per-worker outputs of a non-blocking call; pass it straight to another group call."""

    collect_fn: Callable
    futures: list
    dispatch_fn: Callable | None = None

    @staticmethod
    def concat(data: list) -> DataProtoFuture:
        """A future whose value is the concatenation of the DataProtos behind ``data`` (ObjectRefs)."""
        return DataProtoFuture(collect_fn=DataProto.concat, futures=data)

    def chunk(self, chunks: int) -> list[DataProtoFuture]:
        """One future per chunk of the eventual value."""

        def pick(index):
            return lambda value: value.chunk(chunks=chunks)[index]

        return [
            DataProtoFuture(collect_fn=self.collect_fn, futures=self.futures, dispatch_fn=pick(i))
            for i in range(chunks)
        ]

    def get(self):
        """Wait for the workers, then collect (and pick a chunk if this future is one)."""
        import ray

        # a watched non-blocking call (PendingCall) waits within its deadline; a plain list of refs as ever
        wait = getattr(self.futures, "wait", None)
        outputs = wait() if wait is not None else ray.get(self.futures)
        for out in outputs:
            assert isinstance(out, DataProto), f"DataProtoFuture expects DataProto outputs, got {type(out).__name__}"
        value = self.collect_fn(outputs)
        if self.dispatch_fn is not None:
            value = self.dispatch_fn(value)
        return value


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
