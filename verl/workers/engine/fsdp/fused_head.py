"""Log-probs (and entropy) of the sampled tokens straight from the last hidden states, without the logits.

``actor_rollout_ref.model.use_fused_kernels=True`` (verl's ``torch`` backend). The unfused path builds the
``(tokens, vocab)`` logits, keeps them for the backward and then allocates their gradient: with SmolLM2's 49k
vocabulary and a micro batch of 4 x 257 response positions that is 200 MB of float32 three times over, per worker.
Here the lm-head matmul, the softmax and the gather run over row chunks of the hidden states; the backward recomputes
each chunk's logits instead of keeping them. The cost is one more lm-head matmul per training micro batch (the
recompute); log-prob passes without grad (reference, old log-probs) cost nothing extra.

The output head is swapped for the call only (:func:`fused_output_head`), so the model's own forward (FSDP's
unsharding of the head's weight included) runs unchanged up to it.
"""

from __future__ import annotations

from contextlib import contextmanager
from dataclasses import dataclass

import torch
import torch.nn as nn

# the unfused log-probs' accumulation dtype, so both paths agree
from verl.utils.torch_functional import acc_dtype

__all__ = [
    "FusedHeadOutput",
    "check_fusable_head",
    "fused_linear_logprobs",
    "fused_output_head",
    "logit_transform_reason",
]

# Config attributes of heads that transform the logits after the matmul (Gemma's soft-capping, Cohere's scale):
# the fused head would silently drop that transform, so such models are refused.
_LOGIT_TRANSFORM_ATTRS = ("final_logit_softcapping", "logit_scale", "logits_scaling", "output_multiplier_scale")


def logit_transform_reason(text_config) -> str | None:
    """Why the fused head cannot reproduce this model's logits (``attr=value`` of a transform after the matmul),
    or None. ``text_config``: the model's (text) config; read by the config check before Ray and by the worker."""
    for attr in _LOGIT_TRANSFORM_ATTRS:
        value = getattr(text_config, attr, None)
        if value not in (None, 1, 1.0):
            return f"this model transforms its logits ({attr}={value}), which the fused head does not"
    return None


# Logit elements per chunk (~64 MB per float32 temporary). Larger than the unfused path's cache-sized chunks: each
# chunk here is also an lm-head matmul, which re-reads the whole (vocab, hidden) weight and needs many rows to pay.
_CHUNK_ELEMENTS = 1 << 24


def _row_step(vocab: int, chunk_rows: int | None) -> int:
    return chunk_rows or max(1, _CHUNK_ELEMENTS // max(vocab, 1))


class _FusedLinearLogProbs(torch.autograd.Function):
    """``log_softmax(hidden @ weight.T / T)[label]`` and the softmax's entropy, chunked over rows of ``hidden``.

    Saves ``hidden``, ``weight``, ``labels``, the log-sum-exp and (for the entropy's gradient) ``E_p[z]`` per row:
    O(tokens) beside the inputs, instead of O(tokens x vocab)."""

    @staticmethod
    def forward(ctx, hidden, weight, labels, temperature: float, chunk_rows: int | None, with_entropy: bool):
        n, vocab = hidden.shape[0], weight.shape[0]
        acc = acc_dtype(hidden)
        log_probs = torch.empty(n, dtype=acc, device=hidden.device)
        lse = torch.empty_like(log_probs)
        entropy = torch.empty_like(log_probs) if with_entropy else None
        mean_z = torch.empty_like(log_probs) if with_entropy else None
        step = _row_step(vocab, chunk_rows)
        for s in range(0, n, step):
            z = (hidden[s : s + step] @ weight.T).to(acc).div_(temperature)
            row_lse = torch.logsumexp(z, dim=-1)
            lse[s : s + step] = row_lse
            log_probs[s : s + step] = z.gather(-1, labels[s : s + step].unsqueeze(-1)).squeeze(-1) - row_lse
            if with_entropy:
                z_mean = (torch.exp(z - row_lse.unsqueeze(-1)) * z).sum(-1)
                mean_z[s : s + step] = z_mean
                entropy[s : s + step] = row_lse - z_mean
        ctx.save_for_backward(hidden, weight, labels, lse, mean_z)
        ctx.set_materialize_grads(False)  # an output no loss used (the entropy metric) costs no backward work
        ctx.temperature, ctx.chunk_rows = temperature, chunk_rows
        if not with_entropy:
            return log_probs, None
        return log_probs, entropy

    @staticmethod
    def backward(ctx, grad_log_probs, grad_entropy):
        hidden, weight, labels, lse, mean_z = ctx.saved_tensors
        needs_hidden, needs_weight = ctx.needs_input_grad[0], ctx.needs_input_grad[1]
        grad_hidden = torch.empty_like(hidden) if needs_hidden else None
        # a low-precision weight's gradient is summed over chunks in float32, then cast once
        grad_weight = torch.zeros(weight.shape, dtype=lse.dtype, device=weight.device) if needs_weight else None
        n, step = hidden.shape[0], _row_step(weight.shape[0], ctx.chunk_rows)
        for s in range(0, n, step):
            h = hidden[s : s + step]
            z = (h @ weight.T).to(lse.dtype).div_(ctx.temperature)
            p = torch.exp(z - lse[s : s + step].unsqueeze(-1))
            # d logp[label] / dz = onehot(label) - p;  d H / dz_j = p_j * (E_p[z] - z_j)
            grad_z = torch.zeros_like(z)
            if grad_log_probs is not None:
                g = grad_log_probs[s : s + step].to(z.dtype).unsqueeze(-1)
                grad_z.sub_(p * g).scatter_add_(-1, labels[s : s + step].unsqueeze(-1), g)
            if grad_entropy is not None and mean_z is not None:
                g = grad_entropy[s : s + step].to(z.dtype).unsqueeze(-1)
                grad_z.add_(p.mul_(mean_z[s : s + step].unsqueeze(-1) - z).mul_(g))
            grad_z = grad_z.div_(ctx.temperature).to(hidden.dtype)
            if needs_hidden:
                grad_hidden[s : s + step] = grad_z @ weight
            if needs_weight:
                grad_weight.add_(grad_z.T @ h)
        if needs_weight:
            grad_weight = grad_weight.to(weight.dtype)
        return grad_hidden, grad_weight, None, None, None, None


def fused_linear_logprobs(
    hidden: torch.Tensor,
    weight: torch.Tensor,
    labels: torch.Tensor,
    temperature: float = 1.0,
    with_entropy: bool = False,
    chunk_rows: int | None = None,
) -> tuple[torch.Tensor, torch.Tensor | None]:
    """Log-probs of ``labels`` (and the entropy) under ``softmax(hidden @ weight.T / temperature)``, in float32
    (float64 for float64 inputs).

    hidden ``(..., H)``, weight ``(V, H)``, labels ``(...)`` -> ``(...)`` each; entropy is None unless asked for.
    Differentiable in ``hidden`` and ``weight`` through both outputs.
    """
    lead = hidden.shape[:-1]
    flat = hidden.reshape(-1, hidden.shape[-1])
    flat_labels = labels.reshape(-1).long()
    log_probs, entropy = _FusedLinearLogProbs.apply(
        flat, weight, flat_labels, float(temperature), chunk_rows, with_entropy
    )
    return log_probs.view(lead), (entropy.view(lead) if entropy is not None else None)


def _base_model(module: nn.Module) -> nn.Module:
    return module.get_base_model() if hasattr(module, "get_base_model") else module


def check_fusable_head(module: nn.Module) -> None:
    """Raise ``ValueError`` if ``module``'s output head is not a plain ``hidden @ weight.T`` (a bias, soft-capped or
    scaled logits): the fused log-probs would differ from the model's own."""
    base = _base_model(module)
    head = base.get_output_embeddings() if hasattr(base, "get_output_embeddings") else None
    if head is None or not isinstance(getattr(head, "weight", None), torch.Tensor):
        raise ValueError(
            f"actor_rollout_ref.model.use_fused_kernels=True needs a causal LM with a linear output head; "
            f"{type(base).__name__} has none: set use_fused_kernels=False"
        )
    if getattr(head, "bias", None) is not None:
        raise ValueError("actor_rollout_ref.model.use_fused_kernels=True: the output head has a bias; set it False")
    config = getattr(base, "config", None)
    reason = logit_transform_reason(getattr(config, "text_config", None) or config)
    if reason is not None:
        raise ValueError(f"actor_rollout_ref.model.use_fused_kernels=True: {reason}; set use_fused_kernels=False")


@dataclass
class FusedHeadOutput:
    """What the fused head computed during the forward: ``(b, kept)`` log-probs and entropy (or None)."""

    log_probs: torch.Tensor | None = None
    entropy: torch.Tensor | None = None


@contextmanager
def fused_output_head(
    module: nn.Module, labels: torch.Tensor, temperature: float, with_entropy: bool, kept: int | None = None
):
    """Inside, ``module``'s output head returns the fused log-probs of ``labels`` instead of logits, and the yielded
    :class:`FusedHeadOutput` holds them (and the entropy) after the forward.

    labels ``(b, L)``. ``kept`` (padded inputs): the head's last ``kept + 1`` positions predict the ``kept`` labels
    (the last position predicts nothing kept). ``kept=None`` (packed inputs): position ``i`` predicts ``labels[:, i]``.
    """
    head = _base_model(module).get_output_embeddings()
    result = FusedHeadOutput()

    def forward(hidden: torch.Tensor) -> torch.Tensor:
        if kept is not None:
            hidden = hidden[:, hidden.shape[1] - kept - 1 : -1]
        result.log_probs, result.entropy = fused_linear_logprobs(hidden, head.weight, labels, temperature, with_entropy)
        return result.log_probs  # the model reports it as its "logits"; callers read ``result``

    previous = head.__dict__.get("forward")  # an instance-level forward some wrapper set, if any
    head.forward = forward
    try:
        yield result
        if result.log_probs is None:
            raise RuntimeError(
                f"use_fused_kernels=True: {type(_base_model(module)).__name__}'s forward never called its output head "
                "(get_output_embeddings()); set actor_rollout_ref.model.use_fused_kernels=False"
            )
    finally:
        if previous is None:
            del head.forward  # back to the class's forward
        else:
            head.forward = previous
