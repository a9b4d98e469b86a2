"""Drawing the next token by inverse CDF, for HF ``generate`` on CPU.

HF's sampling calls ``torch.multinomial``, which on CPU draws one exponential variate for every vocabulary entry of
every row (an "exponential race") and keeps the winner. At SmolLM2-135M's 49,152-entry vocabulary and 32 rows that
took 44 ms a decode step on this project's 2-core box (``aten::exponential_`` was 16% of a generation's CPU time).
Inverse-CDF sampling needs one uniform variate per row: sum the weights in blocks, pick a block by the running sum
of the block sums, then a token by the running sum inside that block (5.7 ms). Both draw exactly from the
categorical distribution; only the random stream differs.

:class:`CategoricalSampler` is the last logits processor of a greedy ``generate``: it samples from the processed
scores and returns scores whose argmax is the sampled token, so HF's greedy step takes it. It keeps the log-prob of
each sampled token under the processed scores (what ``output_scores`` would give) when asked.
"""

from __future__ import annotations

import torch
from transformers import LogitsProcessor, TemperatureLogitsWarper, TopKLogitsWarper, TopPLogitsWarper

__all__ = ["CategoricalSampler", "sample_categorical", "sampling_warpers"]

# block of the two-level search: 256 entries keep the block sums and one block's running sum small
_BLOCK = 256


def _below(limit: torch.Tensor, value: torch.Tensor) -> torch.Tensor:
    """``value`` kept strictly under ``limit``: a running sum can end a rounding step away from the total it was
    drawn against, and a draw at or past the end would land on a trailing zero-weight entry."""
    return torch.minimum(value, torch.nextafter(limit, torch.zeros_like(limit)))


def sample_categorical(
    scores: torch.Tensor, generator: torch.Generator | None = None
) -> tuple[torch.Tensor, torch.Tensor]:
    """One token per row of ``scores`` ``(b, v)`` (logits; ``-inf`` marks an excluded entry), drawn from
    ``softmax(scores)``; returns the tokens ``(b,)`` int64 and their log-probs ``(b,)`` float32.

    Raises ValueError where a row has no positive, finite weight (all ``-inf``, or NaN), as ``torch.multinomial``
    does."""
    b, v = scores.shape
    top = scores.max(dim=-1, keepdim=True).values
    weights = torch.exp(scores - top)  # unnormalised probabilities; -inf -> 0
    pad = (-v) % _BLOCK
    blocks = torch.nn.functional.pad(weights, (0, pad)) if pad else weights
    blocks = blocks.view(b, -1, _BLOCK)
    block_cdf = blocks.sum(dim=-1, dtype=torch.float64).cumsum(dim=-1)  # (b, v / block)
    total = block_cdf[:, -1:]
    if not bool(torch.isfinite(total).all()) or not bool((total > 0).all()):
        raise ValueError("probability tensor contains inf, nan or no positive entry: cannot sample a token")
    draw = torch.rand(b, 1, dtype=torch.float64, device=scores.device, generator=generator) * total
    draw = _below(total, draw)
    block = torch.searchsorted(block_cdf, draw, right=True)  # (b, 1): the first block whose running sum passes it
    before = torch.where(block > 0, block_cdf.gather(1, (block - 1).clamp(min=0)), torch.zeros_like(draw))
    inner = blocks.gather(1, block[:, :, None].expand(b, 1, _BLOCK)).squeeze(1).to(torch.float64).cumsum(dim=-1)
    offset = torch.searchsorted(inner, _below(inner[:, -1:], draw - before), right=True)
    tokens = (block * _BLOCK + offset).squeeze(1)
    chosen = scores.gather(1, tokens[:, None]).squeeze(1).double()
    log_probs = chosen - top.squeeze(1).double() - torch.log(total.squeeze(1))
    return tokens, log_probs.float()


def sampling_warpers(temperature: float, top_k: int, top_p: float) -> list[LogitsProcessor]:
    """HF's own sampling warpers for these settings, in the order ``generate`` applies them when it samples itself
    (temperature, top-k, top-p); the neutral ones (1.0, 0, 1.0) are left out, as HF leaves them out."""
    warpers: list[LogitsProcessor] = []
    if temperature != 1.0:
        warpers.append(TemperatureLogitsWarper(temperature))
    if top_k > 0:
        warpers.append(TopKLogitsWarper(top_k=top_k, min_tokens_to_keep=1))
    if top_p < 1.0:
        warpers.append(TopPLogitsWarper(top_p=top_p, min_tokens_to_keep=1))
    return warpers


class CategoricalSampler(LogitsProcessor):
    """The last processor of a greedy ``generate`` that samples: returns ``0`` at the sampled token and ``-inf``
    elsewhere, so the greedy argmax takes it. ``record_log_probs``: :attr:`log_probs` gets each step's ``(b,)``
    log-probs of the sampled tokens under the processed scores."""

    def __init__(self, record_log_probs: bool = False) -> None:
        self.record_log_probs = record_log_probs
        self.log_probs: list[torch.Tensor] = []

    def __call__(self, input_ids: torch.LongTensor, scores: torch.FloatTensor) -> torch.FloatTensor:
        tokens, log_probs = sample_categorical(scores)
        if self.record_log_probs:
            self.log_probs.append(log_probs)
        # a new tensor: with output_logits HF keeps the raw logits, which may be this very input
        chosen = torch.full_like(scores, float("-inf"))
        return chosen.scatter_(1, tokens[:, None], 0.0)

    def step_log_probs(self) -> torch.Tensor:
        """``(b, steps)`` float32: the recorded log-probs, one column per generated token."""
        return torch.stack(self.log_probs, dim=1)
