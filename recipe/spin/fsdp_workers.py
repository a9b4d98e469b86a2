"""SPIN's worker: the FSDP actor-rollout-ref worker with the DPO actor and an in-place reference refresh.

Actor, rollout and reference live in one worker (role ``actor_rollout_ref``), so "the reference becomes the
current actor" is a copy between two models of the same process, shard by shard, with no checkpoint round trip.
"""

from __future__ import annotations

import torch

from recipe.spin.dp_actor import SPINDataParallelPPOActor
from verl.single_controller.base.decorator import Dispatch, register
from verl.workers.roles.actor_rollout_ref import ActorRolloutRefWorker

__all__ = ["SPINActorRolloutRefWorker", "copy_module_weights"]


def _local(tensor: torch.Tensor) -> torch.Tensor:
    """This rank's shard of an FSDP2 (DTensor) parameter, or the tensor itself (FSDP1 flat shards, plain)."""
    to_local = getattr(tensor, "to_local", None)
    return to_local() if to_local is not None else tensor


@torch.no_grad()
def copy_module_weights(source: torch.nn.Module, target: torch.nn.Module) -> int:
    """Copy every parameter of ``source`` into the same-named one of ``target``, local shard to local shard.

    Both must be sharded alike (the actor and the reference share the worker's device mesh); dtypes and devices
    may differ (an fp32 actor on the accelerator, a bf16 reference offloaded to the host). Returns the number of
    tensors copied; raises ValueError when names or shard shapes disagree.
    """
    sources = dict(source.named_parameters())
    targets = dict(target.named_parameters())
    if sources.keys() != targets.keys():
        missing = sorted(sources.keys() ^ targets.keys())[:5]
        raise ValueError(f"actor and reference have different parameters (e.g. {missing}); cannot refresh")
    for name, param in targets.items():
        src, dst = _local(sources[name]), _local(param)
        if src.shape != dst.shape:
            raise ValueError(f"{name}: actor shard {tuple(src.shape)} vs reference shard {tuple(dst.shape)}")
        dst.copy_(src)
    return len(targets)


class SPINActorRolloutRefWorker(ActorRolloutRefWorker):
    """``ActorRolloutRefWorker`` whose actor trains with the DPO loss and whose reference can be refreshed.

    The trainer creates its policy worker with role ``actor_rollout``; this worker always holds the reference too
    (``actor_rollout_ref``), because the refresh copies the actor's weights into it in place.
    """

    def __init__(self, config, role: str):
        super().__init__(config, "actor_rollout_ref" if role == "actor_rollout" else role)

    @register(dispatch_mode=Dispatch.ONE_TO_ALL)
    def init_model(self):
        """Build actor, rollout and reference as the PPO worker does, then swap in the DPO actor."""
        super().init_model()
        if self._is_actor:
            self.actor = SPINDataParallelPPOActor.over_engine(self.config.actor, self.actor_engine)

    @register(dispatch_mode=Dispatch.ONE_TO_ALL)
    def update_reference_policy(self) -> int:
        """Make the reference the current actor (SPIN's self-play refresh); returns the tensors copied."""
        assert self._is_actor and self._is_ref, f"the refresh needs actor and reference, this worker is {self.role!r}"
        with self.actor_engine.resident():
            return copy_module_weights(self.actor_engine.module, self.ref_engine.module)
