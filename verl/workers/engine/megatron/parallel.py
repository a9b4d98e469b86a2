"""megatron-core's process groups (tensor x pipeline x data parallel) over the default group, and their seeds."""

from __future__ import annotations

import torch.distributed as dist

__all__ = ["init_model_parallel"]


def init_model_parallel(tp_size: int, pp_size: int, seed: int = 42) -> None:
    """Create megatron-core's groups for ``tp_size`` x ``pp_size`` (data parallel over the rest) on the default
    process group (gloo on CPU), and seed the RNG streams; a second call with the same sizes (reference and actor in
    one worker) keeps the groups. Collective."""
    from megatron.core import parallel_state

    from verl.workers.engine.megatron.cpu_shims import install_rng_tracker

    world = dist.get_world_size()
    if world % (tp_size * pp_size) != 0:
        raise ValueError(
            f"tensor_model_parallel_size={tp_size} x pipeline_model_parallel_size={pp_size} must divide the number of "
            f"workers ({world})"
        )
    if parallel_state.model_parallel_is_initialized():
        have = (
            parallel_state.get_tensor_model_parallel_world_size(),
            parallel_state.get_pipeline_model_parallel_world_size(),
        )
        if have != (tp_size, pp_size):
            raise ValueError(
                f"megatron (tensor, pipeline) parallel sizes {(tp_size, pp_size)} differ from the {have} this worker "
                "already uses: actor and reference must share them"
            )
        return
    parallel_state.initialize_model_parallel(tensor_model_parallel_size=tp_size, pipeline_model_parallel_size=pp_size)
    install_rng_tracker(seed)
