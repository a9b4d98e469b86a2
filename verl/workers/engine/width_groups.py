"""Rows of a padded micro batch grouped by length, so a forward can run each group at its own trimmed width.

A padded forward costs the micro batch's rows times its widest row (prompts left-padded, responses right-padded, the
all-padding columns trimmed), so every short response pays for the longest one. Run separately, rows sorted by
where their tokens end need only their own group's width. Exact: a padded forward computes each row on its own
(padding is masked out of attention), so splitting the rows changes only float rounding, as trimming columns does.

Backend-free: a grouping is index tensors over the micro batch's rows, and :func:`forward_by_groups` runs a forward
over each group's rows and puts the outputs back in the micro batch's order.
"""

from __future__ import annotations

from collections.abc import Callable

import torch

__all__ = ["PER_CALL_TOKENS", "forward_by_groups", "width_groups"]

# What one more forward call costs, in padded tokens: its fixed per-layer overheads and the smaller matrix products
# of a smaller group. A group splits off only where it saves more padded tokens than this. Measured on the 25M
# Qwen2 benchmark model (32 rows, 2 threads, AVX2): a log-prob pass with 64 took 0.94 of the time with 256 (more
# groups), and 16 was not faster than 64 above the host's noise.
PER_CALL_TOKENS = 64
# Candidate boundaries considered in the sorted rows (the split search is quadratic in them)
_MAX_BOUNDARIES = 64


def _row_spans(attention_mask: torch.Tensor, response_length: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Each row's first and one-past-last column that a trimmed forward must keep (the prompt's last column always:
    its logit predicts the first response token), as :func:`~verl.workers.engine.fsdp.hf_forward.trim_padding_columns`
    keeps them for a group of rows."""
    mask = attention_mask.bool()
    width = mask.shape[-1]
    prompt_length = width - response_length
    columns = torch.arange(width, device=mask.device)
    first = torch.where(mask, columns, width).min(dim=-1).values.clamp(max=prompt_length - 1)
    end = (torch.where(mask, columns, -1).max(dim=-1).values + 1).clamp(min=prompt_length)
    return first, end


def width_groups(
    attention_mask: torch.Tensor,
    response_length: int,
    per_call_tokens: int | None = None,
    count: int | None = None,
) -> list[torch.Tensor] | None:
    """The rows of a padded micro batch ``(b, seqlen)`` (the last ``response_length`` columns the responses) split
    into groups that together compute the fewest padded tokens, each group charged ``per_call_tokens`` (default
    :data:`PER_CALL_TOKENS`). ``count``: exactly that many groups (ranks whose backwards synchronise per forward
    must run as many forwards each), where the rows allow it.

    Returns the groups' row indices (each sorted), or None where one forward over every row is cheapest (or
    ``count`` groups cannot be formed).
    """
    per_call_tokens = PER_CALL_TOKENS if per_call_tokens is None else per_call_tokens
    rows = attention_mask.shape[0]
    if rows < 2 or count == 1:
        return None
    first, end = _row_spans(attention_mask, response_length)
    order = torch.argsort(end * (attention_mask.shape[-1] + 1) - first, stable=True)  # by end, then start
    first_sorted, end_sorted = first[order].tolist(), end[order].tolist()
    # a group boundary is worth considering only where the end changes; too many: evenly spaced among those
    cuts = [i for i in range(1, rows) if end_sorted[i] != end_sorted[i - 1]]
    if len(cuts) > _MAX_BOUNDARIES:
        step = len(cuts) / _MAX_BOUNDARIES
        cuts = [cuts[int(k * step)] for k in range(_MAX_BOUNDARIES)]
    bounds = [0, *cuts, rows]
    if len(bounds) < 3 or (count is not None and count > len(bounds) - 1):
        return None
    segment_start = [min(first_sorted[bounds[k] : bounds[k + 1]]) for k in range(len(bounds) - 1)]
    # cost[i][j]: rows bounds[i]..bounds[j] as one group, its rows times its width plus the call
    cost = [[0] * len(bounds) for _ in bounds]
    for j in range(1, len(bounds)):
        start = end_sorted[bounds[j] - 1]
        for i in range(j - 1, -1, -1):
            start = min(start, segment_start[i])
            cost[i][j] = (bounds[j] - bounds[i]) * (end_sorted[bounds[j] - 1] - start) + per_call_tokens
    ranges = _cheapest_split(cost, count)
    if len(ranges) < 2:
        return None
    return [order[bounds[i] : bounds[j]].sort().values for i, j in ranges]


def _cheapest_split(cost: list[list[int]], count: int | None) -> list[tuple[int, int]]:
    """The split of segments 0..n into consecutive groups (``(i, j)``: segments i..j) with the least summed
    ``cost[i][j]``: any number of groups, or exactly ``count``."""
    n = len(cost) - 1
    inf = float("inf")
    # best[c][j]: the cheapest split of segments 0..j into c groups (c = 0 row: any number, when count is None)
    layers = [0] if count is None else list(range(1, count + 1))
    best = {0: [0.0] + [inf] * n}
    back: dict[int, list[int]] = {}
    for c in layers:
        row, came = [0.0 if count is None else inf] + [inf] * n, [0] * (n + 1)
        source = row if count is None else best[c - 1]
        for j in range(1, n + 1):
            for i in range(j):
                total = source[i] + cost[i][j]
                if total < row[j]:
                    row[j], came[j] = total, i
        best[c], back[c] = row, came
    ranges, j, c = [], n, layers[-1]
    while j > 0:
        i = back[c][j]
        ranges.append((i, j))
        j, c = i, (c if count is None else c - 1)
    return ranges[::-1]


def forward_by_groups(
    micro_batch: dict[str, torch.Tensor],
    groups: list[torch.Tensor],
    forward: Callable[[dict[str, torch.Tensor]], dict[str, torch.Tensor | None]],
) -> dict[str, torch.Tensor | None]:
    """``forward`` over each group's rows of ``micro_batch`` (tensors indexed on their first dimension), its outputs
    ``(rows, ...)`` concatenated back in the micro batch's row order (an output that is None stays None)."""
    parts: dict[str, list[torch.Tensor | None]] = {}
    for rows in groups:
        outputs = forward({key: value[rows.to(value.device)] for key, value in micro_batch.items()})
        for key, value in outputs.items():
            parts.setdefault(key, []).append(value)
    order = torch.cat(groups)
    inverse = torch.empty_like(order)  # the concatenated groups' row i came from row order[i]
    inverse[order] = torch.arange(len(order), device=order.device)
    merged: dict[str, torch.Tensor | None] = {}
    for key, values in parts.items():
        if any(value is None for value in values):
            merged[key] = None
            continue
        stacked = torch.cat(values, dim=0)
        merged[key] = stacked[inverse.to(stacked.device)]
    return merged
