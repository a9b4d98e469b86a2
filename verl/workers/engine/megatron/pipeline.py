"""Pipeline stages of a ``GPTModel`` driven with point-to-point send and receive (gloo on CPU, any backend on GPU).

One micro batch at a time: each stage receives the previous stage's hidden states ``(s, b, hidden)``, runs its layers
and sends its output on; the last stage computes the outputs (and the loss). Backward runs the same chain in reverse:
the last stage's input gradient goes back stage by stage. This is the plain all-forward-then-all-backward order per
micro batch (no 1F1B interleaving); megatron-core's own schedules are not used because they allocate with the literal
``device="cuda"``.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch
import torch.distributed as dist

__all__ = ["StageRunner"]


class StageRunner:
    """This rank's pipeline stage of ``model``: :meth:`forward` and :meth:`backward` of one micro batch, with the
    neighbour stages in step (every stage of a pipeline group calls the same methods in the same order)."""

    def __init__(self, model, hidden_size: int, dtype: torch.dtype):
        from megatron.core import parallel_state

        self.model = model
        self.hidden_size = hidden_size
        self.dtype = dtype
        self.pp_size = parallel_state.get_pipeline_model_parallel_world_size()
        self.is_first = parallel_state.is_pipeline_first_stage()
        self.is_last = parallel_state.is_pipeline_last_stage()
        if self.pp_size > 1:
            self.prev_rank = None if self.is_first else parallel_state.get_pipeline_model_parallel_prev_rank()
            self.next_rank = None if self.is_last else parallel_state.get_pipeline_model_parallel_next_rank()
        self._input = None
        self._output = None

    def forward(self, run_stage: Callable[[], Any], batch_size: int, seq_len: int, with_grad: bool) -> Any:
        """Receive this stage's input (not on the first stage), run ``run_stage()`` (the model's forward on it) and
        send its output on (not on the last stage). Returns ``run_stage``'s result on the last stage, else None."""
        if self.pp_size == 1:
            return run_stage()
        if not self.is_first:
            received = torch.empty(seq_len, batch_size, self.hidden_size, dtype=self.dtype)
            dist.recv(received, src=self.prev_rank)
            if with_grad:
                received.requires_grad_()
            self._input = received
            self.model.set_input_tensor(received)
        output = run_stage()
        if self.is_last:
            return output
        dist.send(output.detach().contiguous(), dst=self.next_rank)
        self._output = output if with_grad else None
        return None

    def backward(self, loss: torch.Tensor | None) -> None:
        """Backward of the micro batch :meth:`forward` ran: from ``loss`` on the last stage, from the gradient the
        next stage sends on the others; the input's gradient goes to the previous stage."""
        if self.pp_size == 1:
            loss.backward()
            return
        if self.is_last:
            loss.backward()
        else:
            # contiguous for recv: a stage's output may be a strided view (sequence parallelism's reduce-scatter)
            grad = torch.empty_like(self._output, memory_format=torch.contiguous_format)
            dist.recv(grad, src=self.next_rank)
            torch.autograd.backward(self._output, grad)
        if not self.is_first:
            dist.send(self._input.grad.contiguous(), dst=self.prev_rank)
        self._input = self._output = None
