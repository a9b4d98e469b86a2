"""The FSDP actor's current weights as a stream of full, HF-named tensors, gathered one piece at a time.

Every hand-off of those weights reads this stream: the colocated vLLM engine's reload
(:mod:`verl.workers.sharding_manager.fsdp_vllm`) and the checkpoint engine that sends them to a rollout on workers of
its own (:mod:`verl.checkpoint_engine`). FSDP2 and plain modules: state-dict order, one DTensor gathered at a time;
FSDP1: one FSDP unit (usually a decoder layer) at a time. A PEFT actor's adapters are folded into the base weights,
and weights that transformers >= 5 fuses in memory are split back into the checkpoint's names.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator

import torch
import torch.nn as nn
from torch.distributed.tensor import DTensor

from verl.utils.device import get_device_name, is_accelerator_available
from verl.utils.fsdp_utils import fsdp_version
from verl.workers.sharding_manager.lora_merge import lora_scalings, merge_lora_stream, strip_peft_prefix

__all__ = [
    "checkpoint_layout",
    "fsdp_full_weights",
    "load_full_weights",
    "normalize_weight_name",
    "tied_lm_head",
]

# Wrapper prefixes that FSDP1, activation checkpointing and torch.compile insert into parameter names.
_WRAPPER_PARTS = ("_fsdp_wrapped_module.", "_checkpoint_wrapped_module.", "_orig_mod.")


def normalize_weight_name(name: str) -> str:
    """The HF checkpoint name of a (possibly wrapped) parameter: wrapper prefixes removed."""
    for part in _WRAPPER_PARTS:
        name = name.replace(part, "")
    return name


def fsdp_full_weights(module: nn.Module, skip_tied_lm_head: bool = False) -> Iterator[tuple[str, torch.Tensor]]:
    """Yield ``(hf_name, full_tensor)`` of ``module``, each tensor the caller's to keep (a collective for sharded
    modules: every rank of the FSDP group must consume the whole iterator in the same order).

    FSDP2 and plain modules: state-dict order, one DTensor gathered at a time. FSDP1: unit by unit (see
    :func:`_fsdp1_unit_tensors`), the same names and values as its full state dict. ``skip_tied_lm_head``: leave out
    ``lm_head.weight`` of a model whose LM head is tied to its embedding (the receiver ties it again).
    """
    scalings = lora_scalings(module, normalize_weight_name)
    stream = _gathered_weights(module, skip_tied_lm_head)
    # a PEFT actor: the engine gets base weights with the adapters folded in (see lora_merge)
    stream = merge_lora_stream(stream, scalings) if scalings else stream
    to_checkpoint = checkpoint_layout(module)
    if to_checkpoint is None:
        yield from stream
    else:
        for name, tensor in stream:
            yield from to_checkpoint(name, tensor)


def _gathered_weights(module: nn.Module, skip_tied_lm_head: bool) -> Iterator[tuple[str, torch.Tensor]]:
    fsdp1 = fsdp_version(module) == 1
    if fsdp1:
        tensors = _fsdp1_unit_tensors(module)
    else:
        tensors = module.state_dict().items()  # FSDP2: DTensor shards, nothing gathered yet
    device = get_device_name() if is_accelerator_available() else None
    for name, tensor in tensors:
        name = strip_peft_prefix(normalize_weight_name(name))
        if skip_tied_lm_head and name == "lm_head.weight":
            continue  # the engine ties it to the embedding; gathering it would be wasted traffic
        if device is not None and tensor.device.type == "cpu":
            tensor = tensor.to(device, non_blocking=True)  # CPU-offloaded shards gather over the device
        if isinstance(tensor, DTensor):
            tensor = tensor.full_tensor()
        elif fsdp1:
            tensor = tensor.clone()  # a view into the unit's gathered storage, which is freed when it reshards
        yield name, tensor.detach()


def _unit_tensors(module: nn.Module, prefix: str) -> Iterator[tuple[str, torch.Tensor]]:
    """``module``'s parameters and persistent buffers in state-dict order, not descending into nested FSDP1 units."""
    from torch.distributed.fsdp import FullyShardedDataParallel as FSDP

    for name, param in module.named_parameters(recurse=False):
        yield prefix + name, param
    for name, buffer in module.named_buffers(recurse=False):
        if name not in module._non_persistent_buffers_set:
            yield prefix + name, buffer
    for name, child in module.named_children():
        if not isinstance(child, FSDP):
            yield from _unit_tensors(child, f"{prefix}{name}.")


def _fsdp1_unit_tensors(root: nn.Module) -> Iterator[tuple[str, torch.Tensor]]:
    """``(wrapped_name, full_tensor)`` of an FSDP1 module, gathering one FSDP unit at a time (a collective).

    Each unit's flat parameter is all-gathered alone (``summon_full_params(recurse=False)``, full precision, as the
    full state dict does) and resharded before the next unit, so beyond the shards only one unit's full parameters
    exist at once. Units come in module pre-order (the root's own tensors first: embedding, final norm, LM head),
    state-dict order inside a unit. A yielded tensor is a view valid until the next one is requested: copy it to
    keep it. Buffers come back in their original dtype, as in the full state dict.
    """
    from torch.distributed.fsdp import FullyShardedDataParallel as FSDP

    # FSDP1 casts buffers to the mixed-precision buffer dtype in place; its state dict casts them back.
    buffer_dtypes = getattr(root, "_buffer_name_to_orig_dtype", {})
    for prefix, unit in root.named_modules():  # pre-order: the root comes first and is lazily initialised as root
        if not isinstance(unit, FSDP):
            continue
        with FSDP.summon_full_params(unit, recurse=False, writeback=False):
            for name, tensor in _unit_tensors(unit, f"{prefix}." if prefix else ""):
                dtype = buffer_dtypes.get(normalize_weight_name(name), tensor.dtype)
                yield name, tensor if tensor.dtype == dtype else tensor.to(dtype)


def checkpoint_layout(module: nn.Module) -> Callable[[str, torch.Tensor], Iterable[tuple[str, torch.Tensor]]] | None:
    """``(name, tensor) -> [(checkpoint_name, tensor), ...]`` for a model whose in-memory weights differ from its
    checkpoint's, None when they do not.

    transformers >= 5 fuses some weights when it loads them (a MoE layer's experts become two 3D tensors, e.g.
    ``mlp.experts.gate_up_proj``); vLLM's loaders read the checkpoint's per-expert names and silently skip the
    fused ones, so the engine would keep its old experts. ``save_pretrained`` undoes the fusion the same way.
    """
    try:
        from transformers import PreTrainedModel
        from transformers.conversion_mapping import get_model_conversion_mapping
        from transformers.core_model_loading import WeightConverter, revert_weight_conversion
    except ImportError:  # transformers 4 keeps the checkpoint's layout in memory
        return None
    hf_model = getattr(module, "_fsdp_wrapped_module", module)
    if hasattr(hf_model, "get_base_model"):  # PEFT: the stream carries the base model's names
        hf_model = hf_model.get_base_model()
    if not isinstance(hf_model, PreTrainedModel):
        return None
    conversions = getattr(hf_model, "_weight_conversions", None)
    if conversions is None:
        conversions = get_model_conversion_mapping(hf_model, add_legacy=False)
    if not any(isinstance(c, WeightConverter) for c in conversions or ()):
        return None

    def to_checkpoint(name: str, tensor: torch.Tensor) -> Iterable[tuple[str, torch.Tensor]]:
        return revert_weight_conversion(hf_model, {name: tensor}).items()

    return to_checkpoint


def tied_lm_head(module: nn.Module) -> bool:
    """Whether ``module``'s (HF, possibly wrapped) config ties its LM head to the input embedding."""
    config = getattr(module, "config", None)
    return bool(getattr(config, "tie_word_embeddings", False))


@torch.no_grad()
def load_full_weights(module: nn.Module, weights: Iterable[tuple[str, torch.Tensor]]) -> int:
    """Copy HF-named full tensors into ``module`` (a plain HF model, or one sharded by FSDP2: each rank keeps its
    shard of every tensor); returns the number of tensors loaded.

    Every parameter must arrive, except a tied LM head (it shares the embedding's storage); an unknown name is an
    error, so a mismatch between sender and receiver cannot go unnoticed.
    """
    targets = {normalize_weight_name(name): tensor for name, tensor in module.state_dict(keep_vars=True).items()}
    tied = tied_lm_head(module)
    loaded = set()
    for name, tensor in weights:
        target = targets.get(name)
        if target is None:
            raise KeyError(f"received weight {name!r} has no counterpart in {type(module).__name__}")
        if isinstance(target, DTensor):
            from torch.distributed.tensor import distribute_tensor

            full = tensor.to(device=target.device, dtype=target.dtype)
            shard = distribute_tensor(full, target.device_mesh, target.placements, src_data_rank=None)
            target.to_local().copy_(shard.to_local())
        else:
            target.data.copy_(tensor)
        loaded.add(name)
    missing = sorted(set(targets) - loaded - ({"lm_head.weight"} if tied else set()))
    if missing:
        raise KeyError(f"the weight transfer left {len(missing)} tensors of the model unset, e.g. {missing[:3]}")
    return len(loaded)
