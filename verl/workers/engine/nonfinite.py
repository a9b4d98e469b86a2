"""Guard of an update loop against non-finite losses and gradient norms.

A mini batch whose loss is not finite on any rank, or whose global gradient norm is not finite, gets no optimizer
step: the gradients are dropped, so weights and optimizer state stay as they were (verl skips a non-finite grad norm
the same way; the loss check also catches a NaN that does not reach the gradients). Every rank takes the same
decision (the loss flag is all-reduced), so the collective inside the clip is entered by all of them or by none.
Each skip is logged with the global step, the mini batch and the micro batch, and counted in
``{role}/nonfinite_skipped``; the trainer stops after ``trainer.max_consecutive_nonfinite`` steps in a row with one.
"""

from __future__ import annotations

import logging
import math
from collections.abc import Callable

import torch
import torch.distributed as dist

from verl.utils.device import get_device_id, get_device_name

__all__ = ["NonFiniteGuard"]

logger = logging.getLogger(__name__)


def _any_rank(flag: bool) -> bool:
    """Whether ``flag`` is True on any rank of the default process group (``flag`` itself without one)."""
    if not (dist.is_available() and dist.is_initialized()) or dist.get_world_size() == 1:
        return flag
    # a CPU flag travels over gloo where the group has it (verl's "cpu:gloo,cuda:nccl"), else on the device
    device = "cpu" if "gloo" in str(dist.get_backend()) else f"{get_device_name()}:{get_device_id()}"
    value = torch.tensor([1.0 if flag else 0.0], device=device)
    dist.all_reduce(value, op=dist.ReduceOp.MAX)
    return bool(value.item() > 0)


class NonFiniteGuard:
    """Watches the micro-batch losses of one update call (``role``: ``actor`` or ``critic``) and runs its steps.

    Use: ``loss_fn = guard.wrap(loss_fn)``; per mini batch ``guard.start_mini_batch()``, the micro batches'
    ``forward_backward``, then ``grad_norm = guard.step(optimizer_step, zero_grad)``; at the end ``guard.metrics()``.
    """

    def __init__(self, role: str, global_step: int | None = None) -> None:
        self.role = role
        self.global_step = global_step
        self.skipped = 0
        self._mini_batch = -1
        self._micro_batch = 0
        self._bad_micro_batches: list[tuple[int, float]] = []

    def wrap(self, loss_fn):
        """``loss_fn`` that also records whether each micro batch's loss is finite."""

        def guarded(outputs, micro_batch):
            loss, metrics = loss_fn(outputs, micro_batch)
            value = loss.detach().float()
            if not bool(torch.isfinite(value).all()):
                self._bad_micro_batches.append((self._micro_batch, float(value.sum())))
            self._micro_batch += 1
            return loss, metrics

        return guarded

    def start_mini_batch(self) -> None:
        """Mark the start of a mini batch (one optimizer step)."""
        self._mini_batch += 1
        self._micro_batch = 0
        self._bad_micro_batches = []

    def step(self, optimizer_step: Callable[[], torch.Tensor], zero_grad: Callable[[], None]) -> torch.Tensor:
        """Run ``optimizer_step`` (clip + step, itself skipping a non-finite norm) for this mini batch, or only
        ``zero_grad`` when a micro batch's loss was not finite on some rank; returns the grad norm (NaN if skipped)."""
        where = f"{self.role} update at global step {self.global_step}, mini batch {self._mini_batch}"
        if _any_rank(bool(self._bad_micro_batches)):
            zero_grad()
            self.skipped += 1
            detail = ", ".join(f"micro batch {i} loss={v}" for i, v in self._bad_micro_batches) or "on another rank"
            logger.warning("%s: non-finite loss (%s); skipping this optimizer update", where, detail)
            return torch.tensor(float("nan"))
        grad_norm = optimizer_step()  # skips the step itself when the norm is not finite
        if not math.isfinite(float(grad_norm)):
            self.skipped += 1
            logger.warning("%s: grad norm %s is not finite; skipped this optimizer update", where, float(grad_norm))
        return grad_norm

    def metrics(self) -> dict[str, float]:
        """``{role}/nonfinite_skipped``: optimizer updates this call skipped."""
        return {f"{self.role}/nonfinite_skipped": float(self.skipped)}
