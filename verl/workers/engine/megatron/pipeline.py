"""Pipeline stages of a ``GPTModel`` driven with point-to-point send and receive (gloo on CPU, any backend on GPU).

One micro batch at a time: each stage receives the previous stage's hidden states ``(s, b, hidden)``, runs its layers
and sends its output on; the last stage computes the outputs (and the loss). Backward runs the same chain in reverse:
the last stage's input gradient goes back stage by stage. This is the plain all-forward-then-all-backward order per
micro batch (no 1F1B interleaving); megatron-core's own schedules are not used because they allocate with the literal
``device="cuda"``.

With virtual pipeline parallelism (``virtual_pipeline_model_parallel_size`` = v) each rank holds v model chunks
(:class:`~verl.workers.engine.megatron.model.ModelChunks`): the chain has ``pp * v`` virtual stages, virtual stage
``k`` being chunk ``k // pp`` of pipeline stage ``k % pp``, so a micro batch goes round the pipeline group v times
(the last stage's chunk ``c`` sends to the first stage's chunk ``c + 1``). Every virtual stage runs in chain order,
one micro batch at a time, so the values are those of the same layers on one process.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch
import torch.distributed as dist

__all__ = ["StageRunner"]


class StageRunner:
    """This rank's pipeline stage of ``model`` (one ``GPTModel`` or its :class:`ModelChunks`): :meth:`forward` and
    :meth:`backward` of one micro batch, with the neighbour stages in step (every stage of a pipeline group calls the
    same methods in the same order)."""

    def __init__(self, model, hidden_size: int, dtype: torch.dtype):
        from megatron.core import parallel_state

        from verl.workers.engine.megatron.model import model_chunks

        self.chunks = model_chunks(model)
        self.hidden_size = hidden_size
        self.dtype = dtype
        self.pp_size = parallel_state.get_pipeline_model_parallel_world_size()
        self.pp_rank = parallel_state.get_pipeline_model_parallel_rank()
        self.is_first = parallel_state.is_pipeline_first_stage()
        self.is_last = parallel_state.is_pipeline_last_stage()
        self.n_virtual = self.pp_size * len(self.chunks)  # virtual stages of the whole chain
        if self.pp_size > 1:
            self.stage_ranks = dist.get_process_group_ranks(parallel_state.get_pipeline_model_parallel_group())
        self._inputs: list[torch.Tensor | None] = [None] * len(self.chunks)
        self._outputs: list[torch.Tensor | None] = [None] * len(self.chunks)

    def _virtual_stage(self, chunk: int) -> int:
        return chunk * self.pp_size + self.pp_rank

    def _rank_of(self, virtual_stage: int) -> int:
        return self.stage_ranks[virtual_stage % self.pp_size]

    def forward(self, run_chunk: Callable[[Any], Any], batch_size: int, seq_len: int, with_grad: bool) -> Any:
        """For each of this rank's chunks in chain order: receive its input (not on the first virtual stage), run
        ``run_chunk(chunk)`` (the chunk's forward on it) and send its output on (not from the last virtual stage).
        Returns the last virtual stage's result on the rank that holds it, else None."""
        if self.pp_size == 1:
            return run_chunk(self.chunks[0])
        result = None
        for c, chunk in enumerate(self.chunks):
            stage = self._virtual_stage(c)
            if stage > 0:
                received = torch.empty(seq_len, batch_size, self.hidden_size, dtype=self.dtype)
                dist.recv(received, src=self._rank_of(stage - 1))
                if with_grad:
                    received.requires_grad_()
                self._inputs[c] = received
                chunk.set_input_tensor(received)
            output = run_chunk(chunk)
            if stage == self.n_virtual - 1:
                result = output
                continue
            dist.send(output.detach().contiguous(), dst=self._rank_of(stage + 1))
            self._outputs[c] = output if with_grad else None
        return result

    def backward(self, loss: torch.Tensor | None) -> None:
        """Backward of the micro batch :meth:`forward` ran, this rank's chunks in reverse chain order: from ``loss``
        on the last virtual stage, from the gradient the next virtual stage sends on the others; each chunk's input
        gradient goes to the previous virtual stage."""
        if self.pp_size == 1:
            loss.backward()
            return
        for c in reversed(range(len(self.chunks))):
            stage = self._virtual_stage(c)
            if stage == self.n_virtual - 1:
                loss.backward()
            else:
                # contiguous for recv: a stage's output may be a strided view (sequence parallelism's reduce-scatter)
                grad = torch.empty_like(self._outputs[c], memory_format=torch.contiguous_format)
                dist.recv(grad, src=self._rank_of(stage + 1))
                torch.autograd.backward(self._outputs[c], grad)
            if stage > 0:
                dist.send(self._inputs[c].grad.contiguous(), dst=self._rank_of(stage - 1))
        self._inputs = [None] * len(self.chunks)
        self._outputs = [None] * len(self.chunks)
