"""Releasing the process-wide state an in-process vLLM engine leaves behind.

vLLM keeps its world group and its model-parallel groups in module globals of ``vllm.distributed.parallel_state``,
and they outlive the engine object. In a Ray actor that ends with the process; in a process that goes on (the
in-process worker group, a served judge in the driver, tests) a later engine would inherit them, and after anyone
destroys torch's default group they point at a dead group ("not initialized in the world group map").

vLLM's own ``destroy_distributed_environment`` also destroys torch's default group, which is right only when vLLM
created it: a trainer process whose default group carries FSDP's collectives must keep it. So the caller records,
before building the engine, whether vLLM will own the default group (:func:`vllm_will_own_default_group`), and
passes that to :func:`release_vllm_distributed_state`.
"""

from __future__ import annotations

import torch.distributed as dist

__all__ = ["release_vllm_distributed_state", "vllm_will_own_default_group"]


def vllm_will_own_default_group() -> bool:
    """Call before building a vLLM engine: True when no default process group exists yet, so the engine creates
    (and may later destroy) it."""
    return not (dist.is_available() and dist.is_initialized())


def release_vllm_distributed_state(owns_default_group: bool) -> None:
    """Destroy vLLM's model-parallel groups and its world group coordinator; torch's default group too only when
    ``owns_default_group`` (vLLM created it). Safe to call when vLLM set nothing up."""
    from vllm.distributed import parallel_state

    parallel_state.destroy_model_parallel()
    if owns_default_group:
        parallel_state.destroy_distributed_environment()
        return
    # the coordinator's groups are subgroups vLLM created; the default group under them stays the caller's
    world = parallel_state._WORLD
    if world is not None:
        world.destroy()
    parallel_state._WORLD = None
