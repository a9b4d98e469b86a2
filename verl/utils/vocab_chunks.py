"""Log-probs and entropy of ``(tokens, vocab)`` logits, computed in row chunks (imported by ``verl_F``).

No full-size float32 copy of the logits is made, forward or backward: each autograd function walks the logits in
cache-sized row blocks and saves only the logits and a per-row statistic for its hand-written backward. The public
entry points (``logprobs_from_logits``, ``entropy_from_logits``, ...) are in :mod:`verl.utils.torch_functional`.
"""

from __future__ import annotations

import torch

__all__ = ["EntropyFunction", "LogProbFunction", "acc_dtype", "foreach_row_chunk"]

# Elements of logits processed at once: every temporary (incl. float32 upcasts) is ~4 MB, so the passes over a chunk
# (upcast, max, exp, sum, gather) read it from cache, not memory. On one core, 16 x 128 rows of a 49152-token
# vocabulary in bf16: forward 137 ms and forward + backward 0.48 s, against 273 ms and 1.41 s with 64 MB chunks.
_CHUNK_ELEMENTS = 1 << 20


def foreach_row_chunk(fn, chunk_rows: int | None, x: torch.Tensor, *others: torch.Tensor) -> None:
    """Call ``fn(x_rows, *other_rows)`` on 2-D row blocks of ``x`` (``(..., V)``) without copying ``x``.

    ``others`` share ``x``'s leading dims (e.g. labels ``(...)`` or a gradient ``(..., V)``) and are cut the
    same way; writes into their blocks land in the originals, so outputs must be contiguous.
    If ``x`` cannot be viewed as ``(N, V)`` (e.g. ``logits[:, -T-1:-1]``), it is walked along dim 0 instead.
    """
    vocab = x.shape[-1]
    if x.dim() == 1:
        x, others = x.unsqueeze(0), tuple(o.unsqueeze(0) for o in others)
    try:
        flat = x.view(-1, vocab)
    except RuntimeError:
        for i in range(x.shape[0]):
            foreach_row_chunk(fn, chunk_rows, x[i], *(o[i] for o in others))
        return
    n = flat.shape[0]
    flat_others = [o.reshape(n, *o.shape[x.dim() - 1 :]) for o in others]
    step = chunk_rows or max(1, _CHUNK_ELEMENTS // max(vocab, 1))
    for s in range(0, n, step):
        fn(flat[s : s + step], *(o[s : s + step] for o in flat_others))


def acc_dtype(logits: torch.Tensor) -> torch.dtype:
    """Accumulation dtype: float64 stays float64, everything else is computed in float32."""
    return torch.float64 if logits.dtype == torch.float64 else torch.float32


class LogProbFunction(torch.autograd.Function):
    """log_softmax(logits)[label] with a hand-written, chunked backward (saves only ``logits`` and ``lse``).

    ``with_entropy``: also returns the entropy of softmax(logits), without a gradient, from the same pass: the
    softmax the entropy averages over is the one that normalises the log-probs."""

    @staticmethod
    def forward(ctx, logits: torch.Tensor, labels: torch.Tensor, chunk_rows: int | None, with_entropy: bool = False):
        lead, acc = logits.shape[:-1], acc_dtype(logits)
        out = torch.empty(lead, dtype=acc, device=logits.device)
        lse = torch.empty(lead, dtype=acc, device=logits.device)
        entropy = [torch.empty(lead, dtype=acc, device=logits.device)] if with_entropy else []

        def block(x, lab, o, l_, *ent):
            x32 = x.to(acc)  # chunk-sized upcast only (no copy when already float32)
            if ent:
                top = x32.amax(-1, keepdim=True)
                p = torch.sub(x32, top).exp_()  # unnormalised softmax
                total = p.sum(-1)
                l_.copy_(top.squeeze(-1) + total.log())
                # H = lse - E_p[x]; E_p[x] as one dot product per row
                mean_x = torch.bmm(p.unsqueeze(1), x32.unsqueeze(2)).view(-1).div_(total)
                ent[0].copy_(l_ - mean_x)
            else:
                l_.copy_(torch.logsumexp(x32, dim=-1))
            o.copy_(x32.gather(-1, lab.long().unsqueeze(-1)).squeeze(-1) - l_)

        foreach_row_chunk(block, chunk_rows, logits, labels, out, lse, *entropy)
        ctx.save_for_backward(logits, labels, lse)
        ctx.chunk_rows = chunk_rows
        if not with_entropy:
            return out
        ctx.mark_non_differentiable(entropy[0])
        return out, entropy[0]

    @staticmethod
    def backward(ctx, grad_out: torch.Tensor, *_entropy_grad):
        logits, labels, lse = ctx.saved_tensors
        grad = torch.empty(logits.shape, dtype=logits.dtype, device=logits.device)
        grad_out = grad_out.to(lse.dtype).contiguous()

        def block(x, lab, l_, g_out, g):
            # d logp[label] / d x = onehot(label) - softmax(x)
            p = torch.exp(x.to(l_.dtype) - l_.unsqueeze(-1)).mul_(-g_out.unsqueeze(-1))
            p.scatter_add_(-1, lab.long().unsqueeze(-1), g_out.unsqueeze(-1))
            g.copy_(p)

        foreach_row_chunk(block, ctx.chunk_rows, logits, labels, lse, grad_out, grad)
        return grad, None, None, None


class EntropyFunction(torch.autograd.Function):
    """Entropy of softmax(logits) with a chunked backward; saves only ``logits``, ``lse`` and ``E_p[x]``."""

    @staticmethod
    def forward(ctx, logits: torch.Tensor, chunk_rows: int | None):
        lead, acc = logits.shape[:-1], acc_dtype(logits)
        ent = torch.empty(lead, dtype=acc, device=logits.device)
        mean_x = torch.empty(lead, dtype=acc, device=logits.device)

        def block(x, e, mx):
            x32 = x.to(acc)
            lse = torch.logsumexp(x32, dim=-1)
            p = torch.exp(x32 - lse.unsqueeze(-1))
            mx.copy_((p * x32).sum(-1))
            e.copy_(lse - mx)

        foreach_row_chunk(block, chunk_rows, logits, ent, mean_x)
        ctx.save_for_backward(logits, ent, mean_x)
        ctx.chunk_rows = chunk_rows
        return ent.to(logits.dtype)

    @staticmethod
    def backward(ctx, grad_out: torch.Tensor):
        logits, ent, mean_x = ctx.saved_tensors
        grad = torch.empty(logits.shape, dtype=logits.dtype, device=logits.device)
        grad_out = grad_out.to(ent.dtype).contiguous()

        def block(x, e, mx, g_out, g):
            # dH/dx_j = p_j * (E_p[x] - x_j), with log p = x - lse and lse = H + E_p[x]
            x32 = x.to(e.dtype)
            p = torch.exp(x32 - (e + mx).unsqueeze(-1))
            g.copy_(p.mul_(mx.unsqueeze(-1) - x32).mul_(g_out.unsqueeze(-1)))

        foreach_row_chunk(block, ctx.chunk_rows, logits, ent, mean_x, grad_out, grad)
        return grad, None
