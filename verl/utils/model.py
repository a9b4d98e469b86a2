"""Model helpers: position ids from masks, HF config overrides, generation config, sizes."""

from __future__ import annotations

import logging
import os

import torch
from torch import nn

logger = logging.getLogger(__name__)

__all__ = [
    "compute_position_id_with_mask",
    "create_random_mask",
    "update_model_config",
    "get_generation_config",
    "get_model_size",
    "print_model_size",
]


def compute_position_id_with_mask(mask: torch.Tensor) -> torch.Tensor:
    """Position ids that count only attended tokens: ``clip(cumsum(mask) - 1, min=0)``.

    mask: ``(..., seqlen)`` of 0/1 (left padding gives leading zeros). Returns the same shape, int64;
    padding before the first real token gets position 0.
    """
    return torch.clip(torch.cumsum(mask.long(), dim=-1) - 1, min=0)


def create_random_mask(
    input_ids: torch.Tensor,
    max_ratio_of_valid_token: float,
    max_ratio_of_left_padding: float,
    min_ratio_of_valid_token: float = 0,
) -> torch.Tensor:
    """Random 0/1 mask ``(bs, seqlen)``: per row a left-pad run, then a run of ones, then zeros (for tests)."""
    assert 0 < max_ratio_of_valid_token <= 1.0, f"max_ratio_of_valid_token={max_ratio_of_valid_token} not in (0, 1]"
    assert 0 <= max_ratio_of_left_padding < 1.0, f"max_ratio_of_left_padding={max_ratio_of_left_padding} not in [0, 1)"
    assert 0 <= min_ratio_of_valid_token <= max_ratio_of_valid_token, (
        f"min_ratio_of_valid_token={min_ratio_of_valid_token} must be in [0, {max_ratio_of_valid_token}]"
    )
    bs, seqlen = input_ids.shape
    max_valid = max(1, int(seqlen * max_ratio_of_valid_token))
    min_valid = max(1, int(seqlen * min_ratio_of_valid_token))
    max_left = int(seqlen * max_ratio_of_left_padding)
    mask = torch.zeros(bs, seqlen, dtype=torch.int64)
    for i in range(bs):
        left = int(torch.randint(0, max_left + 1, (1,)))
        valid = int(torch.randint(min_valid, max_valid + 1, (1,)))
        mask[i, left : min(seqlen, left + valid)] = 1
    return mask


def update_model_config(module_config, override_config_kwargs: dict) -> None:
    """Set attributes of an HF config in place; dict values recurse into nested sub-configs."""
    for key, value in override_config_kwargs.items():
        if (
            isinstance(value, dict)
            and hasattr(module_config, key)
            and not isinstance(getattr(module_config, key), dict)
        ):
            update_model_config(getattr(module_config, key), value)
        elif isinstance(value, dict) and isinstance(getattr(module_config, key, None), dict):
            getattr(module_config, key).update(value)
        else:
            setattr(module_config, key, value)


def get_generation_config(model: str, trust_remote_code: bool = False):
    """The model dir's ``GenerationConfig``; else one derived from its model config; None if neither loads."""
    from transformers import AutoConfig, GenerationConfig

    try:
        return GenerationConfig.from_pretrained(model)
    except OSError:
        pass
    try:
        config = AutoConfig.from_pretrained(model, trust_remote_code=trust_remote_code)
        return GenerationConfig.from_model_config(config)
    except OSError:
        logger.warning("no generation config or model config found in %s", model)
        return None


def get_model_size(model: nn.Module, scale: str = "auto") -> tuple[float, str]:
    """Number of parameters of ``model`` in units of ``scale`` (``B``, ``M``, ``K``, ``""`` or ``auto``)."""
    n_params = sum(p.numel() for p in model.parameters())
    if scale == "auto":
        scale = "B" if n_params > 1e9 else "M" if n_params > 1e6 else "K" if n_params > 1e3 else ""
    divisors = {"B": 1e9, "M": 1e6, "K": 1e3, "": 1}
    if scale not in divisors:
        raise ValueError(f"scale={scale!r} is not supported; expected one of 'B', 'M', 'K', '' or 'auto'")
    return n_params / divisors[scale], scale


def print_model_size(model: nn.Module, name: str | None = None) -> None:
    """Print ``<name> contains <n><scale> parameters`` (only on rank 0 when distributed)."""
    if int(os.environ.get("RANK", "0")) != 0:
        return
    n_params, scale = get_model_size(model, scale="auto")
    print(f"{name or model.__class__.__name__} contains {n_params:.2f}{scale} parameters")
