"""megatron-core's process groups (tensor x pipeline x data parallel) over the default group, and their seeds.

megatron-core keeps one set of groups in module globals (``megatron.core.parallel_state``) and its RNG tracker in
another. Roles of one worker process (actor, reference, critic, reward model) may use different tensor, pipeline and
virtual pipeline (and expert parallel) sizes, so each size tuple gets its own *layout*: the snapshot of those
globals taken right after the groups were made. An engine runs every call inside its layout
(:func:`model_parallel_layout`); megatron-core's modules keep the groups they were built with, and the engine's own
calls to ``parallel_state`` see its layout's.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator

import torch.distributed as dist

__all__ = ["active_layout", "init_model_parallel", "model_parallel_layout"]

# (tp, pp, vpp, ep) -> megatron-core's parallel_state and RNG-tracker globals as they were after that layout's init
_LAYOUTS: dict[tuple[int, int, int | None, int], dict] = {}
_PRISTINE: dict | None = None  # the same globals before any layout was made
_RNG_GLOBALS = ("_CUDA_RNG_STATE_TRACKER", "_CUDA_RNG_STATE_TRACKER_INITIALIZED")


def _state_names(module) -> list[str]:
    return [name for name in vars(module) if name.startswith("_") and name[1:2].isupper()]


def _snapshot() -> dict:
    from megatron.core import parallel_state
    from megatron.core.tensor_parallel import random as mp_random

    state = {("ps", n): getattr(parallel_state, n) for n in _state_names(parallel_state)}
    state.update({("rng", n): getattr(mp_random, n) for n in _RNG_GLOBALS})
    return {key: (dict(v) if isinstance(v, dict) else v) for key, v in state.items()}


def _restore(state: dict) -> None:
    from megatron.core import parallel_state
    from megatron.core.tensor_parallel import random as mp_random

    for (where, name), value in state.items():
        setattr(parallel_state if where == "ps" else mp_random, name, dict(value) if isinstance(value, dict) else value)


def _active_sizes() -> tuple[int, int, int | None, int] | None:
    from megatron.core import parallel_state

    if not parallel_state.model_parallel_is_initialized():
        return None
    return (
        parallel_state.get_tensor_model_parallel_world_size(),
        parallel_state.get_pipeline_model_parallel_world_size(),
        parallel_state.get_virtual_pipeline_model_parallel_world_size(),
        parallel_state.get_expert_model_parallel_world_size(),
    )


def init_model_parallel(
    tp_size: int, pp_size: int, seed: int = 42, vpp_size: int | None = None, ep_size: int = 1
) -> tuple[int, int, int | None, int]:
    """Create (or re-enter) megatron-core's groups for ``tp_size`` x ``pp_size`` (data parallel over the rest; with
    ``vpp_size`` model chunks per pipeline stage, ``ep_size`` expert-parallel ranks) on the default process group
    (gloo on CPU), seed the RNG streams, and leave that layout active; returns its key for
    :func:`model_parallel_layout`. Collective the first time a layout is made: every rank of the default group makes
    the same layouts in the same order (the role workers build their engines in the same order on every rank)."""
    from megatron.core import parallel_state

    from verl.workers.engine.megatron.cpu_shims import install_rng_tracker

    global _PRISTINE
    world = dist.get_world_size()
    if world % (tp_size * pp_size) != 0:
        raise ValueError(
            f"tensor_model_parallel_size={tp_size} x pipeline_model_parallel_size={pp_size} must divide the number of "
            f"workers ({world})"
        )
    key = (tp_size, pp_size, vpp_size, ep_size)
    active = _active_sizes()
    if active is not None and active not in _LAYOUTS:  # made outside this module (tests, user code): keep it too
        _LAYOUTS[active] = _snapshot()
    if key in _LAYOUTS:
        _restore(_LAYOUTS[key])
        return key
    if _PRISTINE is None:
        if active is not None:
            raise RuntimeError("megatron-core's groups exist but their pristine state was not recorded")
        _PRISTINE = _snapshot()
    _restore(_PRISTINE)
    parallel_state.initialize_model_parallel(
        tensor_model_parallel_size=tp_size,
        pipeline_model_parallel_size=pp_size,
        virtual_pipeline_model_parallel_size=vpp_size,
        expert_model_parallel_size=ep_size,
    )
    install_rng_tracker(seed)
    _LAYOUTS[key] = _snapshot()
    return key


@contextlib.contextmanager
def model_parallel_layout(key: tuple[int, int, int | None, int]) -> Iterator[None]:
    """Within the block megatron-core's globals are those of layout ``key`` (see :func:`init_model_parallel`); the
    layout active before is restored afterwards, with the RNG streams as the block left them."""
    before = _active_sizes()
    if before == key:
        yield
        return
    if before is not None:
        _LAYOUTS[before] = _snapshot()
    _restore(_LAYOUTS[key])
    try:
        yield
    finally:
        _LAYOUTS[key] = _snapshot()
        if before is not None:
            _restore(_LAYOUTS[before])


def active_layout() -> tuple[int, int, int | None, int]:
    """The key of the layout active now (the one :func:`init_model_parallel` made or re-entered last)."""
    sizes = _active_sizes()
    if sizes is None or sizes not in _LAYOUTS:
        raise RuntimeError("no megatron-core layout is active: call init_model_parallel first")
    return sizes
