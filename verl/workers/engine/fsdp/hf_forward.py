"""The HF model forward of the FSDP engine: sequence packing ("remove padding"), trimmed padded forwards, Ulysses
slices, the compute device and precision, and the clipped optimizer step.

Packing ("remove padding") concatenates the valid tokens of every row into one ``(1, total_tokens)`` row whose
position ids restart at 0 for each sequence; attention must then stay inside each sequence. Recent transformers
releases derive that block-diagonal mask from the restarting position ids themselves (flash-attention varlen on
GPU, a packed-sequence mask for sdpa/eager); for older releases an explicit 4-D block-diagonal causal mask is built.
"""

from __future__ import annotations

import contextlib
import inspect
import logging

import torch
import torch.nn as nn
from tensordict import TensorDict

from verl.utils.device import get_device_id, get_device_name, is_accelerator_available
from verl.utils.fsdp_utils import clip_grad_norm_
from verl.workers.engine.fsdp import cpu_attention, packed_attention

try:  # transformers >= 4.53 detects packed sequences from position ids for every attention implementation
    from transformers.masking_utils import find_packed_sequence_indices as _hf_packed_detection
except ImportError:  # pragma: no cover - depends on the installed transformers
    _hf_packed_detection = None

logger = logging.getLogger(__name__)

# attention functions that run a packed row per sequence when given its boundaries (packed_attention.per_sequence)
_PER_SEQUENCE_IMPLEMENTATIONS = ("sdpa", cpu_attention.IMPLEMENTATION)

__all__ = [
    "autocast_context",
    "compute_device",
    "gather_sequence_parallel",
    "optimizer_step",
    "pack_padded_inputs",
    "packed_forward_kwargs",
    "packed_response_positions",
    "padded_forward",
    "score_sequences",
    "slice_for_sequence_parallel",
    "takes_logits_to_keep",
    "trim_padding_columns",
    "unpack_to_padded",
]


def trim_padding_columns(
    input_ids: torch.Tensor, attention_mask: torch.Tensor, position_ids: torch.Tensor, response_length: int
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, int]:
    """Drop the columns that are padding in every row: leading ones (left-padded prompts) and trailing ones
    (right-padded responses). Exact: such columns are masked out of attention and of every loss, and positions are
    kept. Returns the trimmed ``input_ids``, ``attention_mask``, ``position_ids`` ((b, L') or (b, 3, L')) and how
    many response columns remain (the first ones; the cut ones hold no token of any row).

    A micro batch padded to ``max_prompt_length + max_response_length`` is often much wider than its longest
    sequence; the forward (and backward) cost falls with the width.
    """
    prompt_length = attention_mask.shape[-1] - response_length
    used = attention_mask.any(dim=0).nonzero()
    if used.numel() == 0:
        return input_ids, attention_mask, position_ids, response_length
    # keep the prompt's last column: its logit predicts the first response token
    start = min(int(used[0]), prompt_length - 1)
    end = max(int(used[-1]) + 1, prompt_length)
    kept = end - prompt_length
    return input_ids[:, start:end], attention_mask[:, start:end], position_ids[..., start:end], kept


def padded_forward(
    module: nn.Module,
    input_ids: torch.Tensor,
    attention_mask: torch.Tensor,
    position_ids: torch.Tensor,
    response_length: int,
    response_logits_only: bool = False,
    **model_kwargs,
):
    """``module``'s output over the padded batch with the all-padding columns trimmed (:func:`trim_padding_columns`),
    and how many response columns it covers: the last ``kept + 1`` positions predict the kept response tokens.

    ``response_logits_only``: a causal LM computes logits for those last ``kept + 1`` positions only (HF's
    ``logits_to_keep``), where the model takes it. Exact: the other positions' logits are never read, and with a
    big vocabulary the lm-head and softmax over the prompt's positions are a large share of the cost.
    """
    input_ids, attention_mask, position_ids, kept = trim_padding_columns(
        input_ids, attention_mask, position_ids, response_length
    )
    if response_logits_only and takes_logits_to_keep(module):
        model_kwargs["logits_to_keep"] = kept + 1
    if position_ids.dim() == 3:  # mrope (bs, 3, seqlen): Qwen-VL models take (3, bs, seqlen)
        position_ids = position_ids.transpose(0, 1)
    output = module(
        input_ids=input_ids, attention_mask=attention_mask, position_ids=position_ids, use_cache=False, **model_kwargs
    )
    return output, kept


def takes_logits_to_keep(module: nn.Module) -> bool:
    """Whether ``module``'s forward (through a PEFT wrapper) accepts HF's ``logits_to_keep``."""
    base = module.get_base_model() if hasattr(module, "get_base_model") else module
    return "logits_to_keep" in inspect.signature(base.forward).parameters


def pack_padded_inputs(
    input_ids: torch.Tensor, attention_mask: torch.Tensor, position_ids: torch.Tensor
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Keep the valid tokens of each row, concatenated row after row.

    input_ids, attention_mask ``(bs, seqlen)``; position_ids ``(bs, seqlen)`` or mrope ``(bs, 3, seqlen)``.
    Returns ``input_ids_rmpad (1, nnz)``, ``position_ids_rmpad (1, nnz)`` (mrope: ``(4, 1, nnz)``, see
    :func:`verl.models.transformers.qwen2_vl.packed_position_ids`) and the boolean ``valid`` mask ``(bs, seqlen)`` for
    :func:`unpack_to_padded`.
    """
    valid = attention_mask.bool()
    ids = input_ids[valid].unsqueeze(0)
    if position_ids.dim() == 3:
        from verl.models.transformers.qwen2_vl import packed_position_ids

        pos = packed_position_ids(position_ids.transpose(0, 1)[:, valid].unsqueeze(1), valid)
    else:
        pos = position_ids[valid].unsqueeze(0)
    return ids, pos, valid


def packed_response_positions(valid: torch.Tensor, response_length: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Where, in the packed row of :func:`pack_padded_inputs`, the logits that predict response tokens are: the
    packed indices ``(n,)`` of the valid positions among each row's last ``response_length + 1`` but one, and the
    ``(bs, response_length)`` mask of the response slots they predict (for :func:`unpack_to_padded`).

    valid: ``(bs, seqlen)``, the last ``response_length`` columns the responses."""
    predicts = torch.zeros_like(valid)
    predicts[:, -response_length - 1 : -1] = True
    read = valid & predicts
    packed_index = torch.cumsum(valid.reshape(-1), dim=0).view(valid.shape) - 1
    return packed_index[read], read[:, -response_length - 1 : -1]


def unpack_to_padded(values: torch.Tensor, valid: torch.Tensor, fill: float = 0.0) -> torch.Tensor:
    """Scatter packed per-token values ``(nnz, ...)`` back to ``(bs, seqlen, ...)`` (padding gets ``fill``)."""
    out = values.new_full((*valid.shape, *values.shape[1:]), fill)
    out[valid] = values  # index_put keeps the autograd graph to ``values``
    return out


def slice_for_sequence_parallel(
    sp_size: int,
    input_ids_rmpad: torch.Tensor,
    position_ids_rmpad: torch.Tensor,
    labels_rmpad: torch.Tensor | None = None,
    multi_modal: bool = False,
):
    """This Ulysses SP rank's slice of a packed row: pad ``nnz`` to a multiple of ``sp_size``, keep ``1/sp`` of it
    (``multi_modal``: ids and positions are padded but kept whole, the model slices after embedding; labels are sliced).

    input_ids_rmpad, labels_rmpad ``(1, nnz)``; position_ids_rmpad ``(1, nnz)`` or ``(3, 1, nnz)``. Returns the
    sliced ``(ids, positions, labels, pad_size)``; unchanged with ``pad_size=0`` when ``sp_size == 1``. Must run
    inside the worker's ``FSDPUlyssesShardingManager``, which installs the SP group.
    """
    if sp_size == 1:
        return input_ids_rmpad, position_ids_rmpad, labels_rmpad, 0
    from verl.utils.ulysses import get_ulysses_sequence_parallel_world_size, ulysses_pad_and_slice_inputs

    if get_ulysses_sequence_parallel_world_size() != sp_size:
        raise RuntimeError(
            f"ulysses_sequence_parallel_size={sp_size} but the installed SP group has "
            f"{get_ulysses_sequence_parallel_world_size()} ranks: call inside the worker's FSDPUlyssesShardingManager"
        )
    if multi_modal:
        # a vision-language model must see every image's pad tokens to place the image embeddings: pad only; its text
        # model keeps this rank's slice after the merge (verl.models.transformers.qwen2_vl.ulysses_text_model)
        from verl.utils.ulysses import ulysses_pad

        ids, pos, pad_size = ulysses_pad(input_ids_rmpad, position_ids_rmpad, sp_size)
    else:
        ids, pos, pad_size = ulysses_pad_and_slice_inputs(input_ids_rmpad, position_ids_rmpad, sp_size)
    if labels_rmpad is not None:
        labels_rmpad, _, _ = ulysses_pad_and_slice_inputs(labels_rmpad, None, sp_size)
    return ids, pos, labels_rmpad, pad_size


def gather_sequence_parallel(values: torch.Tensor, sp_size: int, pad_size: int) -> torch.Tensor:
    """Per-token values of this SP rank's slice ``(nnz_padded / sp, ...)`` -> the whole row ``(nnz, ...)``.

    Autograd-aware: the backward keeps this rank's slice of the gradient, scaled by ``sp`` because every SP rank
    computes the same loss and FSDP averages gradients over all ``dp * sp`` ranks.
    """
    if sp_size == 1:
        return values
    from verl.utils.ulysses import gather_outpus_and_unpad

    return gather_outpus_and_unpad(values, gather_dim=0, unpad_dim=0, padding_size=pad_size)


def _block_causal_mask(position_ids: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
    """Additive ``(1, 1, nnz, nnz)`` mask: causal inside each packed sequence, -inf across sequences."""
    pos = position_ids.reshape(-1)
    seq_id = torch.cumsum((pos == 0).long(), dim=0)
    idx = torch.arange(pos.numel(), device=pos.device)
    allowed = (seq_id[:, None] == seq_id[None, :]) & (idx[:, None] >= idx[None, :])
    mask = torch.zeros(allowed.shape, dtype=dtype, device=pos.device)
    mask.masked_fill_(~allowed, torch.finfo(dtype).min)
    return mask[None, None]


def packed_forward_kwargs(
    module: torch.nn.Module, position_ids_rmpad: torch.Tensor, dtype: torch.dtype, sequence_parallel: bool = False
) -> dict:
    """Model kwargs for a packed forward: ``attention_mask=None`` (the model isolates sequences by position ids)
    or, with a transformers release that cannot, an explicit block-diagonal mask for eager/sdpa attention.

    With sdpa (and :mod:`~verl.workers.engine.fsdp.cpu_attention`'s form) on a text model, the sequence boundaries
    go along as varlen keywords, so attention runs per sequence (:mod:`~verl.workers.engine.fsdp.packed_attention`)
    instead of over the whole row; not under Ulysses (``sequence_parallel``), whose rank holds a slice of the row.
    """
    kwargs = {"position_ids": position_ids_rmpad, "attention_mask": None, "use_cache": False}
    config = getattr(module, "config", None)
    impl = getattr(config, "_attn_implementation", None)
    if _hf_packed_detection is None and impl not in ("flash_attention_2", "flash_attention_3"):
        pos = position_ids_rmpad[0] if position_ids_rmpad.dim() == 3 else position_ids_rmpad
        kwargs["attention_mask"] = _block_causal_mask(pos, dtype)
    elif impl in _PER_SEQUENCE_IMPLEMENTATIONS and not sequence_parallel and position_ids_rmpad.dim() == 2:
        packed_attention.install()
        kwargs.update(packed_attention.packed_sequence_kwargs(position_ids_rmpad))
    return kwargs


def compute_device() -> torch.device:
    """The device micro batches are moved to (``cpu`` on a CPU-only machine)."""
    if not is_accelerator_available():
        return torch.device("cpu")
    return torch.device(get_device_name(), get_device_id())


def autocast_context():
    """bf16 autocast on accelerators, as verl; none on CPU, where bf16 is emulated (the model dtype decides)."""
    if not is_accelerator_available():
        return contextlib.nullcontext()
    return torch.autocast(device_type=get_device_name(), dtype=torch.bfloat16)


def optimizer_step(module: nn.Module, optimizer: torch.optim.Optimizer, grad_clip: float | None) -> torch.Tensor:
    """Clip the global grad norm to ``grad_clip`` and step; a non-finite norm skips the step (grads are dropped)."""
    if grad_clip is None:
        raise ValueError("grad_clip is None: set actor.grad_clip / critic.grad_clip (verl's default is 1.0)")
    grad_norm = clip_grad_norm_(module, max_norm=grad_clip)
    if not torch.isfinite(grad_norm):
        logger.warning("grad_norm is not finite (%s): skipping this optimizer step", grad_norm.item())
        optimizer.zero_grad()
    else:
        optimizer.step()
    return grad_norm


@torch.no_grad()
def score_sequences(
    module,
    inputs: TensorDict,
    micro_batch_size: int,
    max_token_len: int | None = None,
    use_remove_padding: bool = False,
) -> torch.Tensor:
    """One score per row: the model's logit at the row's last valid token. Returns ``(bs,)`` float32.

    inputs: ``input_ids``, ``attention_mask``, ``position_ids`` ``(bs, seqlen)``. ``max_token_len``
    (``reward_model.use_dynamic_bsz``): micro batches of at most that many real tokens instead of
    ``micro_batch_size`` rows; the scores come back in the rows' order. ``use_remove_padding``: each micro batch runs
    as one packed row of its valid tokens (:func:`pack_padded_inputs`), as the actor's and critic's packed forwards.
    """
    if max_token_len is not None:
        from verl.utils.seqlen_balancing import get_reverse_idx, rearrange_micro_batches

        micro_batches, partitions = rearrange_micro_batches(inputs, max_token_len)
        scores = torch.cat([score_sequences(module, mb, len(mb), None, use_remove_padding) for mb in micro_batches])
        return scores[torch.tensor(get_reverse_idx([i for p in partitions for i in p]))]
    module.eval()
    device = next(module.parameters()).device
    scores = []
    for start in range(0, inputs.batch_size[0], micro_batch_size):
        chunk = inputs[start : start + micro_batch_size]
        input_ids = chunk["input_ids"].to(device)
        attention_mask = chunk["attention_mask"].to(device)
        position_ids = chunk["position_ids"].to(device)
        if use_remove_padding:
            ids_rmpad, pos_rmpad, valid = pack_padded_inputs(input_ids, attention_mask, position_ids)
            kwargs = packed_forward_kwargs(module, pos_rmpad, next(module.parameters()).dtype)
            logits = unpack_to_padded(module(input_ids=ids_rmpad, **kwargs).logits.squeeze(-1).squeeze(0), valid)
        else:
            logits = module(input_ids=input_ids, attention_mask=attention_mask, position_ids=position_ids).logits
            logits = logits.squeeze(-1)
        last = torch.argmax(position_ids * attention_mask, dim=-1)
        scores.append(logits[torch.arange(logits.shape[0], device=device), last].float().cpu())
    return torch.cat(scores)
