"""Gradient checkpointing that recomputes only the cheap operations where memory allows it.

verl's ``enable_gradient_checkpointing`` is Hugging Face's: each decoder layer keeps only its input, and the backward
runs the whole layer's forward again, matrix multiplications included. That trades a third more compute in the
update for memory, the right trade on an accelerator. On a CPU host compute is what is short: there the selective
form saves what is expensive to recompute (the outputs of every matrix multiplication and of attention) and the
backward re-runs only the element-wise operations between them (norms, rotary embedding, activation, residual
adds). The results are the same: on CPU a recomputed product equals the saved one bit for bit.

Measured on an AVX2 host (25M Qwen2, 32 rows x 176 tokens, fp32, 2 threads, one update step: forward, backward,
clip, fused AdamW; medians of two rounds of four steps): full recompute 12.0-13.2 s, selective 9.1-9.4 s, none
8.8 s; peak resident memory 1.97, 2.7 and 3.45 GB.

Policies (``model.gradient_checkpointing_policy``, read only when ``enable_gradient_checkpointing`` is on):

- ``full``: every layer recomputed (verl's behaviour).
- ``selective``: products saved, always.
- ``auto`` (the default): on CPU, selective for a micro batch whose saved products fit in this worker's part (one
  of the host's worker processes) of a quarter of the host's available memory, else full; on an accelerator, full.
  The choice is logged when it is first made and whenever it changes.
"""

from __future__ import annotations

import logging

import torch
from torch import nn
from torch.utils.checkpoint import CheckpointPolicy, create_selective_checkpoint_contexts, noop_context_fn

from verl.utils.device import host_memory_share_bytes
from verl.workers.config.model import GRADIENT_CHECKPOINTING_POLICIES as POLICIES

__all__ = [
    "POLICIES",
    "SELECTIVE_SHARE_OF_AVAILABLE",
    "ActivationCheckpointing",
    "product_bytes_per_token",
    "saved_products",
]

logger = logging.getLogger(__name__)

# the most the products of one micro batch may take under "auto", as a share of the host's available memory divided
# among its worker processes (the same bound as the freed memory they may hold, verl.utils.device)
SELECTIVE_SHARE_OF_AVAILABLE = 0.25
# a layer saves its linear layers' outputs and, beside them, attention's output and statistics: counted as a quarter
# more than the linear outputs (Qwen2's attention output is a seventh of them)
_BEYOND_LINEAR_OUTPUTS = 1.25

_PRODUCT_OPS = (
    "mm",
    "addmm",
    "_scaled_dot_product_flash_attention_for_cpu",
    "_scaled_dot_product_flash_attention",
    "_scaled_dot_product_efficient_attention",
    "_scaled_dot_product_cudnn_attention",
)


def saved_products() -> frozenset:
    """The ATen operators whose outputs the selective form saves: matrix products (every linear layer goes through
    ``mm`` or ``addmm``) and the fused attention kernels. Batched products (``bmm``) are recomputed: in the plain
    attention form they are the score matrices, large and cheap to redo."""
    ops = []
    for name in _PRODUCT_OPS:
        try:
            ops.append(getattr(torch.ops.aten, name).default)
        except (AttributeError, RuntimeError):  # a kernel this build of PyTorch does not have
            continue
    return frozenset(ops)


class ActivationCheckpointing:
    """How a trained model's layers are checkpointed; :meth:`enable` turns it on, :meth:`plan` decides per micro
    batch (under ``auto``).

    policy: one of :data:`POLICIES`. device_type: where the model computes (``auto`` is selective only on CPU)."""

    def __init__(self, policy: str = "full", device_type: str = "cpu"):
        if policy not in POLICIES:
            raise ValueError(f"gradient_checkpointing_policy={policy!r}: expected one of {', '.join(POLICIES)}")
        self.policy = policy
        self._on_cpu = device_type == "cpu"
        self._selective = policy == "selective"
        self._bytes_per_token = 0
        self._logged: bool | None = None
        self._saved = saved_products()

    def enable(self, module: nn.Module) -> None:
        """Turn on Hugging Face gradient checkpointing of ``module`` (non-reentrant, as verl does), with this policy."""
        kwargs = {"use_reentrant": False}
        if self.policy != "full":
            kwargs["context_fn"] = self._context
        module.gradient_checkpointing_enable(gradient_checkpointing_kwargs=kwargs)
        self._bytes_per_token = product_bytes_per_token(module)

    def plan(self, tokens: int) -> bool:
        """Choose the form of the next training forward, over ``tokens`` tokens (per rank); returns whether it is
        selective. Only ``auto`` decides; the other policies are fixed."""
        if self.policy != "auto":
            return self._selective
        need = tokens * self._bytes_per_token
        budget = host_memory_share_bytes(SELECTIVE_SHARE_OF_AVAILABLE) if self._on_cpu else None
        self._selective = budget is not None and need <= budget
        if self._selective != self._logged:
            self._logged = self._selective
            form = "selective (products saved)" if self._selective else "full recompute"
            if not self._on_cpu:
                room = "on an accelerator"
            else:
                room = "host memory unknown" if budget is None else f"room for {budget / 2**20:.0f} MB"
            logger.info(
                "gradient checkpointing (policy auto): %s; %.0f MB of products for %d tokens, %s",
                form,
                need / 2**20,
                tokens,
                room,
            )
        return self._selective

    def _context(self):
        if not self._selective:
            return noop_context_fn()
        return create_selective_checkpoint_contexts(self._keep_products)

    def _keep_products(self, ctx, op, *args, **kwargs):
        return CheckpointPolicy.MUST_SAVE if op in self._saved else CheckpointPolicy.PREFER_RECOMPUTE


def product_bytes_per_token(module: nn.Module) -> int:
    """Bytes the selective form saves per token: the linear layers' outputs inside the checkpointed layers (the
    modules Hugging Face checkpoints, ``GradientCheckpointingLayer``), with attention's output beside them, in the
    parameters' element size (fp32 masters under mixed precision: an upper bound)."""
    try:
        from transformers.modeling_layers import GradientCheckpointingLayer
    except ImportError:  # an older transformers: count every decoder-side linear layer
        GradientCheckpointingLayer = None
    layers = [
        m
        for m in module.modules()
        if GradientCheckpointingLayer is not None and isinstance(m, GradientCheckpointingLayer)
    ]
    if not layers:
        layers = [module]
    features = sum(m.out_features for layer in layers for m in layer.modules() if isinstance(m, nn.Linear))
    element = max((p.element_size() for p in module.parameters()), default=4)
    return int(features * element * _BEYOND_LINEAR_OUTPUTS)
