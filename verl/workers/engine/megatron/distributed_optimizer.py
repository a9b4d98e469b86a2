"""``use_distributed_optimizer=True``: the optimizer state sharded over the data-parallel replicas (ZeRO-1), as
megatron-core's distributed optimizer does.

All trainable parameters of this rank, flattened in order into one buffer, are split into equal contiguous slices,
one per data-parallel rank (the last padded). Each rank keeps an fp32 master copy of its slice only, and AdamW (the
same settings, built by the same function as without sharding) holds state for that slice only. A step:
reduce-scatter the gradients (averaged over replicas) into the slice, clip by the global norm, step the slice,
all-gather the slices back into the parameters. AdamW is elementwise, so this computes what the unsharded optimizer
computes; the optimizer's memory per rank is divided by the data-parallel size.
"""

from __future__ import annotations

import torch
import torch.distributed as dist
import torch.nn as nn

__all__ = ["ShardedFlatParams"]


class ShardedFlatParams:
    """This data-parallel rank's slice of the flattened ``params`` (``master``, an fp32 ``nn.Parameter`` for the
    optimizer) and the moves between the full parameters and it. ``counted``: per parameter, whether its gradient
    enters the global norm on this rank (tensor-parallel duplicates on one rank only)."""

    def __init__(self, params: list[nn.Parameter], counted: list[bool], dp_group):
        self.params = params
        self.dp_group = dp_group
        self.dp_size, self.dp_rank = dist.get_world_size(dp_group), dist.get_rank(dp_group)
        self.numels = [p.numel() for p in params]
        total = sum(self.numels)
        self.shard_size = -(-total // self.dp_size)
        self.padded = self.shard_size * self.dp_size
        self.start = self.dp_rank * self.shard_size
        weights = [torch.full((n,), float(c)) for n, c in zip(self.numels, counted)]
        self.norm_weight = self._slice(self._flat(weights))
        self.master = nn.Parameter(self._slice(self._flat([p.detach() for p in params])).float().clone())

    def _flat(self, tensors: list[torch.Tensor]) -> torch.Tensor:
        flat = torch.zeros(self.padded, dtype=torch.float32)
        torch.cat([t.reshape(-1).float() for t in tensors], out=flat[: sum(self.numels)])
        return flat

    def _slice(self, flat: torch.Tensor) -> torch.Tensor:
        return flat[self.start : self.start + self.shard_size]

    def reduce_gradients(self) -> None:
        """``master.grad`` := this slice of the gradients averaged over the data-parallel replicas."""
        from verl.workers.engine.megatron.cpu_shims import reduce_scatter_via_all_reduce

        grads = self._flat([p.grad if p.grad is not None else torch.zeros_like(p) for p in self.params])
        shard = torch.empty(self.shard_size, dtype=torch.float32)
        reduce_scatter_via_all_reduce(shard, grads, group=self.dp_group)
        self.master.grad = shard / self.dp_size

    def grad_squares(self) -> torch.Tensor:
        """The sum of the squared gradients of this slice that the global norm counts on this rank."""
        return (self.master.grad.pow(2) * self.norm_weight).sum()

    @torch.no_grad()
    def gather_parameters(self) -> None:
        """Every rank's updated slice back into the full parameters (all-gather over the data-parallel group)."""
        if self.dp_size > 1:
            slices = [torch.empty_like(self.master) for _ in range(self.dp_size)]
            dist.all_gather(slices, self.master.detach().contiguous(), group=self.dp_group)
            flat = torch.cat(slices)
        else:
            flat = self.master.detach()
        offset = 0
        for p, n in zip(self.params, self.numels):
            p.copy_(flat[offset : offset + n].view_as(p))
            offset += n

    @torch.no_grad()
    def refresh_master(self) -> None:
        """The master slice from the parameters (after a checkpoint loaded them)."""
        self.master.copy_(self._slice(self._flat([p.detach() for p in self.params])))
