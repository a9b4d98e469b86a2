"""LoRA adapters folded into their base weights on the way to the inference engine.

The engine keeps the base architecture and never learns about adapters: each adapted linear layer arrives as
``W + scaling * B @ A`` under its base name. The merge is done one layer at a time as the stream passes (the base
weight waits for its two small adapter matrices, which follow it in state-dict order), so the hand-off holds at most
one extra layer. This is the hand-off ``docs/lora.md`` compares with handing vLLM a LoRA request.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator

import torch
from torch import nn

__all__ = ["lora_scalings", "merge_lora_stream", "strip_peft_prefix"]

_PEFT_PREFIX = "base_model.model."


def strip_peft_prefix(name: str) -> str:
    """The name without PEFT's ``base_model.model.`` wrapper prefix."""
    return name[len(_PEFT_PREFIX) :] if name.startswith(_PEFT_PREFIX) else name


def lora_scalings(module: nn.Module, normalize) -> dict[str, tuple[str, float]] | None:
    """``{layer name: (active adapter, scaling)}`` of every LoRA layer in ``module`` (names through ``normalize``
    and without the PEFT prefix), or None when the module has no adapters."""
    try:
        from peft.tuners.lora import LoraLayer
    except ImportError:
        return None
    found = {}
    for name, layer in module.named_modules():
        if not isinstance(layer, LoraLayer):
            continue
        adapters = list(layer.active_adapters)
        if len(adapters) != 1:
            raise NotImplementedError(f"LoRA layer {name} has active adapters {adapters}; the hand-off merges one")
        if getattr(layer, "fan_in_fan_out", False) or getattr(layer, "use_dora", {}).get(adapters[0], False):
            raise NotImplementedError(f"LoRA layer {name}: fan_in_fan_out and DoRA adapters are not merged here")
        found[strip_peft_prefix(normalize(name))] = (adapters[0], float(layer.scaling[adapters[0]]))
    return found or None


def merge_lora_stream(
    tensors: Iterable[tuple[str, torch.Tensor]], scalings: dict[str, tuple[str, float]]
) -> Iterator[tuple[str, torch.Tensor]]:
    """Base-model ``(name, tensor)`` pairs from a PEFT model's stream (PEFT prefix already stripped)."""
    pending: dict[str, dict[str, torch.Tensor]] = {}
    for name, tensor in tensors:
        layer, kind = _lora_part(name)
        if layer is None:
            yield name, tensor
            continue
        if layer not in scalings:
            raise KeyError(f"{name}: a LoRA tensor of a layer the model does not list as a LoRA layer")
        adapter, scaling = scalings[layer]
        if kind == "bias":
            yield f"{layer}.bias", tensor
            continue
        if kind in ("lora_A", "lora_B") and not name.endswith(f".{kind}.{adapter}.weight"):
            continue  # an inactive adapter
        parts = pending.setdefault(layer, {})
        parts[kind] = tensor
        if len(parts) == 3:
            del pending[layer]
            base = parts["weight"]
            delta = parts["lora_B"].float() @ parts["lora_A"].float()
            yield f"{layer}.weight", (base.float() + scaling * delta).to(base.dtype)
    if pending:
        raise RuntimeError(f"LoRA layers {sorted(pending)} ended the stream without all of weight, lora_A and lora_B")


def _lora_part(name: str) -> tuple[str | None, str]:
    """``(layer, kind)`` for a LoRA layer's tensor (kind: weight, bias, lora_A, lora_B); ``(None, "")`` otherwise."""
    for marker, kind in ((".base_layer.weight", "weight"), (".base_layer.bias", "bias")):
        if name.endswith(marker):
            return name[: -len(marker)], kind
    for kind in ("lora_A", "lora_B"):
        marker = f".{kind}."
        if marker in name:
            return name[: name.index(marker)], kind
    if ".lora_" in name:
        raise NotImplementedError(f"{name}: only the lora_A/lora_B adapters of linear layers are merged")
    return None, ""
