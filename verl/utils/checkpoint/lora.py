"""PEFT LoRA state dicts: split adapter from base weights, merge ``W += B @ A * scaling``, save the adapter.

Keys follow peft's module naming inside a ``PeftModel``: ``base_model.model.<path>.base_layer.weight``,
``<path>.lora_A.<adapter>.weight`` (r, in), ``<path>.lora_B.<adapter>.weight`` (out, r),
``<path>.lora_embedding_A.<adapter>`` (r, num_embeddings), ``<path>.lora_embedding_B.<adapter>`` (dim, r),
and ``<path>.modules_to_save.<adapter>.*`` / ``<path>.original_module.*`` for fully trained modules.
"""

from __future__ import annotations

import json
import math
import os
import re

import torch

__all__ = [
    "LORA_ADAPTER_DIR",
    "has_lora_weights",
    "lora_adapter_state_dict",
    "merge_lora_state_dict",
    "save_lora_adapter",
]

LORA_ADAPTER_DIR = "lora_adapter"
_PEFT_PREFIX = "base_model.model."
_LORA_PART = re.compile(
    r"^(?P<module>.+)\.(?P<kind>lora_A|lora_B|lora_embedding_A|lora_embedding_B)(?:\.(?P<rest>.+))?$"
)


def has_lora_weights(state_dict: dict) -> bool:
    """Whether the state dict holds peft LoRA tensors (a key containing ``lora_``)."""
    return any("lora_" in k for k in state_dict)


def _strip_adapter_name(rest: str | None, adapter_name: str) -> str:
    """``default.weight`` -> ``weight``; ``default`` -> ``''`` (embedding LoRA parameters have no suffix)."""
    if rest is None:
        return ""
    parts = rest.split(".")
    if parts and parts[0] == adapter_name:
        parts = parts[1:]
    return ".".join(parts)


def lora_adapter_state_dict(state_dict: dict, adapter_name: str = "default") -> dict:
    """The LoRA tensors under peft's adapter-file names (adapter name removed, ``base_model.model.`` kept)."""
    out = {}
    for key, value in state_dict.items():
        match = _LORA_PART.match(key)
        if match is None:
            continue
        rest = _strip_adapter_name(match.group("rest"), adapter_name)
        name = f"{match.group('module')}.{match.group('kind')}" + (f".{rest}" if rest else "")
        out[name] = value
    return out


def _pattern_value(patterns: dict, module: str, default):
    """peft's rank/alpha patterns: a key matches a module name ending with it (as a regex)."""
    for pattern, value in (patterns or {}).items():
        if re.match(rf"(.*\.)?({pattern})$", module):
            return value
    return default


def _scaling(config: dict, module: str, r: int) -> float:
    alpha = _pattern_value(config.get("alpha_pattern"), module, config["lora_alpha"])
    if config.get("use_rslora", False):
        return alpha / math.sqrt(r)
    return alpha / r


def _base_name(key: str, adapter_name: str) -> str | None:
    """The plain-model name of a non-LoRA peft key; None for keys that vanish (``original_module``)."""
    if key.startswith(_PEFT_PREFIX):
        key = key[len(_PEFT_PREFIX) :]
    if ".original_module." in key:
        return None
    key = key.replace(f".modules_to_save.{adapter_name}.", ".")
    return key.replace(".base_layer.", ".")


def merge_lora_state_dict(state_dict: dict, lora_config: dict, adapter_name: str = "default") -> dict:
    """A plain-model state dict with every LoRA delta merged into its base weight.

    ``lora_config``: peft's adapter config (``lora_alpha``, optional ``use_rslora``, ``fan_in_fan_out``,
    ``alpha_pattern``); the rank of each module is read from its ``lora_A`` shape (so ``rank_pattern`` is honoured).
    Deltas are computed in fp32 and added in the base weight's dtype, as peft's ``merge_and_unload`` does.
    """
    if "lora_alpha" not in lora_config:
        raise KeyError(f"lora_config has no 'lora_alpha' (keys: {sorted(lora_config)}); cannot scale LoRA deltas")
    if any("lora_magnitude_vector" in k for k in state_dict):
        raise NotImplementedError("merging DoRA adapters (lora_magnitude_vector) is not supported")
    pairs: dict[str, dict[str, torch.Tensor]] = {}
    merged = {}
    for key, value in state_dict.items():
        match = _LORA_PART.match(key)
        if match is not None:
            pairs.setdefault(match.group("module"), {})[match.group("kind")] = value
            continue
        name = _base_name(key, adapter_name)
        if name is not None:
            merged[name] = value
    fan_in_fan_out = bool(lora_config.get("fan_in_fan_out", False))
    for module, parts in pairs.items():
        plain = module[len(_PEFT_PREFIX) :] if module.startswith(_PEFT_PREFIX) else module
        weight_key = f"{plain}.weight"
        if weight_key not in merged:
            raise KeyError(f"LoRA module {module!r} has no base weight {weight_key!r} in the state dict")
        base = merged[weight_key]
        if "lora_A" in parts and "lora_B" in parts:
            a, b = parts["lora_A"].float(), parts["lora_B"].float()
            delta = b @ a
            if fan_in_fan_out:
                delta = delta.T
        elif "lora_embedding_A" in parts and "lora_embedding_B" in parts:
            a, b = parts["lora_embedding_A"].float(), parts["lora_embedding_B"].float()
            delta = (b @ a).T
        else:
            raise KeyError(f"LoRA module {module!r} has an incomplete pair: {sorted(parts)}")
        delta = delta * _scaling(lora_config, plain, a.shape[0])
        merged[weight_key] = (base.float() + delta).to(base.dtype) if base.dtype != torch.float32 else base + delta
    return merged


def infer_lora_config(adapter_state: dict, base_model_name_or_path: str | None = None) -> dict:
    """A minimal adapter config from the tensors alone (rank from shapes; ``lora_alpha`` unknown, so 0)."""
    ranks, targets = set(), set()
    for key, value in adapter_state.items():
        match = _LORA_PART.match(key)
        if match and match.group("kind") in ("lora_A", "lora_embedding_A"):
            ranks.add(int(value.shape[0]))
            targets.add(match.group("module").rsplit(".", 1)[-1])
    return {
        "peft_type": "LORA",
        "task_type": "CAUSAL_LM",
        "r": max(ranks) if ranks else 0,
        "lora_alpha": 0,
        "target_modules": sorted(targets),
        "bias": "none",
        "base_model_name_or_path": base_model_name_or_path,
    }


def load_lora_config(folder: str) -> dict | None:
    """``folder/adapter_config.json`` as a dict, or None when absent."""
    path = os.path.join(folder, "adapter_config.json")
    if not os.path.isfile(path):
        return None
    with open(path) as f:
        return json.load(f)


def save_lora_adapter(adapter_state: dict, lora_config: dict, out_dir: str) -> str:
    """Write ``adapter_model.safetensors`` and ``adapter_config.json`` (peft's adapter layout) into ``out_dir``."""
    from safetensors.torch import save_file

    os.makedirs(out_dir, exist_ok=True)
    tensors = {k: v.detach().cpu().contiguous() for k, v in adapter_state.items()}
    save_file(tensors, os.path.join(out_dir, "adapter_model.safetensors"), metadata={"format": "pt"})
    with open(os.path.join(out_dir, "adapter_config.json"), "w") as f:
        json.dump(lora_config, f, indent=2, sort_keys=True, default=_json_default)
    return out_dir


def _json_default(value):
    if isinstance(value, set | frozenset):
        return sorted(value)
    if hasattr(value, "value"):  # enums such as peft's TaskType
        return value.value
    return str(value)
