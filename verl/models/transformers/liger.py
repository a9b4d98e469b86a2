"""Liger's Triton kernels on a Hugging Face model (``model.use_liger=True``): a speed and memory option only.

``liger_kernel`` swaps a loaded model's RMSNorm, rotary embedding and SwiGLU MLP for fused Triton kernels, in place,
by its ``model_type``. The numbers it computes are the model's own up to float rounding, so a run without it trains
the same model, only slower. Triton kernels need a GPU: on CPU, or where the package is missing or cannot be imported,
:func:`liger_unavailable_reason` says why, for the config check to refuse the key before Ray starts.
"""

from __future__ import annotations

import logging

import torch

logger = logging.getLogger(__name__)

__all__ = ["apply_liger_kernels", "liger_unavailable_reason"]


def _liger_patch_function():
    from liger_kernel.transformers import monkey_patch

    return monkey_patch._apply_liger_kernel_to_instance, getattr(monkey_patch, "MODEL_TYPE_TO_APPLY_LIGER_FN", None)


def liger_unavailable_reason(device_type: str) -> str | None:
    """Why Liger's kernels cannot run for workers on ``device_type`` (``cpu``, ``cuda``, ...), or None when they can."""
    if device_type == "cpu":
        return "Liger's kernels are Triton GPU kernels and do not run on CPU"
    try:
        _liger_patch_function()
    except ImportError as exc:
        if exc.name and exc.name.split(".")[0] == "liger_kernel":
            return "the liger-kernel package is not installed (pip install liger-kernel, or the project's gpu extra)"
        return f"liger-kernel is installed but cannot be imported ({type(exc).__name__}: {exc})"
    return None


def apply_liger_kernels(model: torch.nn.Module, key: str, *, fused_linear_cross_entropy: bool) -> None:
    """Patch ``model`` (a freshly loaded HF model, before LoRA and FSDP wrapping) with Liger's kernels, in place.

    ``key`` names the setting that asked for it, for the error. ``fused_linear_cross_entropy`` also replaces the
    causal LM's forward with Liger's, which fuses the output head into a cross-entropy loss on ``labels``: the PPO
    roles compute their log-probs from the logits (or from the project's own fused head), so they pass False.
    """
    try:
        patch, patched_types = _liger_patch_function()
    except ImportError as exc:
        raise ImportError(f"{key}=True needs the liger-kernel package (pip install liger-kernel): {exc}") from exc
    model_type = getattr(getattr(model, "config", None), "model_type", None)
    if patched_types is not None and model_type not in patched_types:
        # Liger itself only logs this at info level; the run is correct, just not faster
        logger.warning(
            "%s=True: liger-kernel has no kernels for model_type=%r; the model runs unpatched", key, model_type
        )
    patch(model=model, fused_linear_cross_entropy=fused_linear_cross_entropy, swiglu=True)
