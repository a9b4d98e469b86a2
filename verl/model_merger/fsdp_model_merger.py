"""Merge the per-rank FSDP shards of a ``global_step_N/actor`` (or ``critic``) folder into full tensors."""

from __future__ import annotations

import json
import logging
import os
from concurrent.futures import ThreadPoolExecutor

import numpy as np
import torch

from verl.model_merger.base_model_merger import BaseModelMerger

logger = logging.getLogger(__name__)

__all__ = ["FSDPModelMerger", "merge_shards"]


def _local(value) -> torch.Tensor:
    """The local piece of a saved tensor (DTensor shard, FSDP1 ShardedTensor, or a plain tensor)."""
    from torch.distributed.tensor import DTensor

    if isinstance(value, DTensor):
        return value.to_local()
    if hasattr(value, "local_tensor"):
        return value.local_tensor()
    return value


def _mesh_info(value, world_size: int) -> tuple[np.ndarray, tuple]:
    """``(rank grid, placements)`` of a DTensor; a plain tensor counts as ``Shard(0)`` over a 1-D mesh."""
    from torch.distributed.tensor import DTensor, Shard

    if isinstance(value, DTensor):
        return value.device_mesh.mesh.cpu().numpy(), tuple(value.placements)
    return np.arange(world_size), (Shard(0),)


def merge_shards(key: str, shards: list, world_size: int) -> torch.Tensor:
    """Rebuild one full tensor from the per-rank pieces ``shards[r]``.

    Mesh dims are reduced innermost first: ``Shard(d)`` -> ``torch.cat(dim=d)``, ``Replicate`` -> the first piece
    (so a ``("ddp", "fsdp")`` mesh drops its replicated dim); ``Partial`` is refused.
    """
    from torch.distributed.tensor import Replicate, Shard

    grid, placements = _mesh_info(shards[0], world_size)
    if grid.size > len(shards):
        raise ValueError(f"{key}: the device mesh holds {grid.size} ranks but only {len(shards)} shards were loaded")
    pieces = np.empty(grid.shape, dtype=object)
    for index, rank in np.ndenumerate(grid):
        pieces[index] = _local(shards[int(rank)])
    for mesh_dim in reversed(range(grid.ndim)):
        placement = placements[mesh_dim]
        moved = np.moveaxis(pieces, mesh_dim, -1)
        reduced = np.empty(moved.shape[:-1], dtype=object)
        for index in np.ndindex(*moved.shape[:-1]):
            group = list(moved[index])
            if isinstance(placement, Shard):
                reduced[index] = torch.cat(group, dim=placement.dim)
            elif isinstance(placement, Replicate):
                reduced[index] = group[0]
            else:
                raise NotImplementedError(f"{key}: placement {placement} on mesh dim {mesh_dim} cannot be merged")
        pieces = reduced
    return pieces.item() if isinstance(pieces, np.ndarray) else pieces


class FSDPModelMerger(BaseModelMerger):
    """Load ``model_world_size_{W}_rank_{r}.pt`` for every rank, merge by placement, then save or test."""

    def _get_world_size(self) -> int:
        path = os.path.join(self.config.local_dir, "fsdp_config.json")
        if not os.path.isfile(path):
            raise FileNotFoundError(f"{path} not found: --local_dir must hold an FSDP checkpoint")
        with open(path) as f:
            config = json.load(f)
        if "world_size" not in config:
            raise ValueError(f"{path} has no 'world_size' (keys: {sorted(config)})")
        return int(config["world_size"])

    def _shard_path(self, world_size: int, rank: int) -> str:
        return os.path.join(self.config.local_dir, f"model_world_size_{world_size}_rank_{rank}.pt")

    def _load_shards(self, world_size: int) -> list[dict]:
        paths = [self._shard_path(world_size, r) for r in range(world_size)]
        missing = [p for p in paths if not os.path.isfile(p)]
        if missing:
            raise FileNotFoundError(f"missing model shards for world_size={world_size}: {missing}")

        def load(path):
            # DTensor shards unpickle without a process group; only their local tensors are used.
            return torch.load(path, map_location="cpu", weights_only=False)

        with ThreadPoolExecutor(max_workers=min(8, world_size)) as pool:
            return list(pool.map(load, paths))

    def load_merged_state_dict(self) -> dict:
        """The full (unsharded) state dict in the saved dtype, keys as the training model named them."""
        world_size = self._get_world_size()
        shards = self._load_shards(world_size)
        merged = {}
        for key in shards[0]:
            merged[key] = merge_shards(key, [s[key] for s in shards], world_size).contiguous()
        return merged

    def merge_and_save(self) -> None:
        """``merge``: write the HF model (+ tokenizer, + ``lora_adapter/``) to target_dir; ``test``: compare."""
        state_dict, adapter, lora_config = self.resolve_lora(self.load_merged_state_dict())
        state_dict = self.cast(state_dict)
        if self.config.operation == "test":
            self.test_state_dict(state_dict)
            return
        if adapter is not None:
            self.save_lora_adapter(adapter, lora_config)
        self.save_hf_model_and_tokenizer(state_dict)
        if self.config.hf_upload:
            self.upload_to_huggingface()
        logger.info("merged %s into %s", self.config.local_dir, self.config.target_dir)
