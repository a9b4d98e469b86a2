"""Balance sequences across data-parallel ranks and token-budget micro batches.

Two uses share one partitioner:

* the trainer reorders a batch so every DP rank receives about the same number of tokens
  (`get_seqlen_balanced_partitions` with `equal_size=True`, one partition per rank);
* workers with `use_dynamic_bsz` split their shard into micro batches that each fit a token
  budget (`rearrange_micro_batches`, partitions of unequal size).

The partitioner is the largest differencing method (Karmarkar-Karp) generalised to k sets: keep
a pool of partial k-way solutions, repeatedly merge the two with the largest spread so that the
heaviest set of one meets the lightest set of the other.
"""

from __future__ import annotations

import heapq
import itertools
import logging
from collections.abc import Sequence

import torch
import torch.distributed as dist

logger = logging.getLogger(__name__)

__all__ = [
    "ceildiv",
    "roundup_divisible",
    "karmarkar_karp",
    "greedy_partition",
    "get_seqlen_balanced_partitions",
    "log_seqlen_unbalance",
    "rearrange_micro_batches",
    "get_reverse_idx",
]


def ceildiv(a: int, b: int) -> int:
    """Integer ceiling of a / b."""
    return -(a // -b)


def roundup_divisible(a: int, b: int) -> int:
    """Smallest multiple of b that is >= a."""
    return ceildiv(a, b) * b


class _Bin:
    """One set of a partial partition: the item indices it holds and their total length."""

    __slots__ = ("total", "items")

    def __init__(self, items: list[int], total: int):
        self.items = items
        self.total = total

    def sort_key(self) -> tuple:
        return (self.total, len(self.items), self.items)


class _PartialSolution:
    """k bins kept sorted heaviest first; merging pairs the heaviest bins of one with the lightest of another."""

    __slots__ = ("bins",)

    def __init__(self, bins: list[_Bin]):
        self.bins = sorted(bins, key=_Bin.sort_key, reverse=True)

    @property
    def spread(self) -> int:
        return self.bins[0].total - self.bins[-1].total

    def heap_key(self) -> tuple[int, int]:
        # heapq is a min-heap: negate so the largest spread (ties: heaviest bin) pops first.
        return (-self.spread, -self.bins[0].total)

    def merge(self, other: _PartialSolution) -> _PartialSolution:
        k = len(self.bins)
        merged = [
            _Bin(self.bins[i].items + other.bins[k - 1 - i].items, self.bins[i].total + other.bins[k - 1 - i].total)
            for i in range(k)
        ]
        return _PartialSolution(merged)


def _as_int_list(seqlen_list: Sequence[int] | torch.Tensor) -> list[int]:
    if isinstance(seqlen_list, torch.Tensor):
        return [int(x) for x in seqlen_list.tolist()]
    return [int(x) for x in seqlen_list]


def karmarkar_karp(seqlen_list: Sequence[int], k_partitions: int, equal_size: bool) -> list[list[int]]:
    """Split item indices into k sets with near-equal length sums (largest differencing method).

    With `equal_size` every set gets `len(seqlen_list) / k_partitions` items (the length must divide).
    Returns k lists of indices into `seqlen_list`.
    """
    lengths = _as_int_list(seqlen_list)
    n = len(lengths)
    if k_partitions <= 0:
        raise ValueError(f"k_partitions must be positive, got {k_partitions}")
    order = sorted(range(n), key=lambda i: (lengths[i], i))

    initial: list[_PartialSolution] = []
    if equal_size:
        if n % k_partitions != 0:
            raise ValueError(f"equal_size needs len(seqlen_list)={n} divisible by k_partitions={k_partitions}")
        # Each group of k consecutive (sorted) items becomes one solution with one item per bin, so every
        # merge adds exactly one item to every bin and the sizes stay equal.
        for start in range(0, n, k_partitions):
            group = order[start : start + k_partitions]
            initial.append(_PartialSolution([_Bin([i], lengths[i]) for i in group]))
    else:
        for i in order:
            bins = [_Bin([i], lengths[i])] + [_Bin([], 0) for _ in range(k_partitions - 1)]
            initial.append(_PartialSolution(bins))

    if not initial:
        return [[] for _ in range(k_partitions)]

    tie = itertools.count()  # stable tie-break so the heap never compares solutions
    heap = [(sol.heap_key(), next(tie), sol) for sol in initial]
    heapq.heapify(heap)
    while len(heap) > 1:
        _, _, first = heapq.heappop(heap)
        _, _, second = heapq.heappop(heap)
        merged = first.merge(second)
        heapq.heappush(heap, (merged.heap_key(), next(tie), merged))

    partitions = [list(b.items) for b in heap[0][2].bins]
    if equal_size:
        for p in partitions:
            assert len(p) == n // k_partitions, f"equal_size partition has {len(p)} items, expected {n // k_partitions}"
    return partitions


def greedy_partition(seqlen_list: Sequence[int], k_partitions: int, equal_size: bool) -> list[list[int]]:
    """Assign items, longest first, to the set with the smallest sum; returns k lists of indices.

    With `equal_size` a per-item bias larger than the total length makes the set with the fewest
    items always the lightest, so sizes differ by at most one.
    """
    lengths = _as_int_list(seqlen_list)
    bias = sum(lengths) + 1 if equal_size else 0
    sums = [0] * k_partitions
    partitions: list[list[int]] = [[] for _ in range(k_partitions)]
    for i in sorted(range(len(lengths)), key=lambda j: (-lengths[j], j)):
        target = min(range(k_partitions), key=lambda p: (sums[p], p))
        partitions[target].append(i)
        sums[target] += lengths[i] + bias
    return partitions


def get_seqlen_balanced_partitions(seqlen_list: Sequence[int], k_partitions: int, equal_size: bool) -> list[list[int]]:
    """Partition indices of `seqlen_list` into k non-empty sets with balanced length sums.

    Every index appears exactly once; each partition is returned sorted ascending.
    """
    lengths = _as_int_list(seqlen_list)
    assert len(lengths) >= k_partitions, f"number of items ({len(lengths)}) < k_partitions ({k_partitions})"
    partitions = karmarkar_karp(lengths, k_partitions, equal_size)
    assert len(partitions) == k_partitions, f"got {len(partitions)} partitions, expected {k_partitions}"
    seen: set[int] = set()
    for p in partitions:
        assert len(p) > 0, "a partition is empty"
        for i in p:
            assert i not in seen, f"index {i} assigned twice"
            seen.add(i)
    assert seen == set(range(len(lengths))), "some indices were not assigned"
    return [sorted(p) for p in partitions]


def log_seqlen_unbalance(seqlen_list: Sequence[int], partitions: list[list[int]], prefix: str) -> dict[str, float]:
    """Metrics comparing token sums per rank before (consecutive blocks) and after balancing."""
    lengths = _as_int_list(seqlen_list)
    k = len(partitions)
    block = len(lengths) // k
    # Without balancing, rank r gets the r-th consecutive block of the batch.
    block_sums = [sum(lengths[r * block : (r + 1) * block]) for r in range(k)]
    balanced_sums = [sum(lengths[i] for i in p) for p in partitions]
    return {
        f"{prefix}/min": min(block_sums),
        f"{prefix}/max": max(block_sums),
        f"{prefix}/minmax_diff": max(block_sums) - min(block_sums),
        f"{prefix}/balanced_min": min(balanced_sums),
        f"{prefix}/balanced_max": max(balanced_sums),
        f"{prefix}/mean": sum(lengths) / k,
    }


def _fits(lengths: list[int], partitions: list[list[int]], budget: int) -> bool:
    return all(sum(lengths[i] for i in p) <= budget for p in partitions)


def rearrange_micro_batches(
    batch,
    max_token_len: int,
    dp_group=None,
    num_batches_divided_by: int | None = None,
    same_micro_num_in_dp: bool = True,
    min_num_micro_batch: int | None = None,
):
    """Split a TensorDict into micro batches of at most `max_token_len` real tokens each.

    `batch["attention_mask"]` is `(bs, seq_len)`; token counts are its row sums.
    Returns `(micro_batches, micro_bsz_idx)`: the list of TensorDicts and, for each, the row
    indices (ascending) it was built from.
    """
    attention_mask = batch["attention_mask"]
    seq_len = attention_mask.shape[-1]
    assert max_token_len >= seq_len, (
        f"max_token_len ({max_token_len}) must be >= the padded sequence length ({seq_len}); "
        "raise *_max_token_len_per_gpu"
    )
    lengths = [int(x) for x in attention_mask.sum(dim=1).tolist()]
    bs = len(lengths)
    num = min(bs, ceildiv(sum(lengths), max_token_len))
    if min_num_micro_batch is not None:
        num = max(num, min_num_micro_batch)
    num = max(num, 1)
    # The ceiling is a lower bound: a balanced split can still put one set over budget (e.g. three
    # rows of 6 tokens with budget 9). Add micro batches until every set fits; bs sets always fit.
    while num < bs and not _fits(lengths, get_seqlen_balanced_partitions(lengths, num, False), max_token_len):
        num += 1

    if dist.is_available() and dist.is_initialized() and same_micro_num_in_dp:
        # Every DP rank must run the same number of forward/backward passes (collectives inside FSDP).
        count = torch.tensor([num], device=attention_mask.device)
        dist.all_reduce(count, op=dist.ReduceOp.MAX, group=dp_group)
        num = int(count.item())
    if num_batches_divided_by is not None:
        num = roundup_divisible(num, num_batches_divided_by)

    partitions = get_seqlen_balanced_partitions(lengths, num, equal_size=False)
    if not _fits(lengths, partitions, max_token_len):
        logger.warning("a micro batch exceeds max_token_len=%d after matching the DP micro-batch count", max_token_len)
    micro_batches = [batch[torch.tensor(p, dtype=torch.long)] for p in partitions]
    return micro_batches, partitions


def get_reverse_idx(idx_map: Sequence[int]) -> list[int]:
    """Inverse permutation: `out[idx_map[i]] = i`."""
    idx = [int(i) for i in idx_map]
    reverse = [0] * len(idx)
    for position, original in enumerate(idx):
        reverse[original] = position
    return reverse
