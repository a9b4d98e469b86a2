"""Tests for verl.utils.seqlen_balancing: balanced partitions and token-budget micro batches."""

import random

import pytest
import torch
from tensordict import TensorDict

from verl.utils.seqlen_balancing import (
    ceildiv,
    get_reverse_idx,
    get_seqlen_balanced_partitions,
    greedy_partition,
    karmarkar_karp,
    log_seqlen_unbalance,
    rearrange_micro_batches,
    roundup_divisible,
)


def _sums(lengths, partitions):
    return [sum(lengths[i] for i in p) for p in partitions]


def _assert_exact_cover(partitions, n):
    flat = [i for p in partitions for i in p]
    assert sorted(flat) == list(range(n))


def test_ceildiv_and_roundup():
    assert [ceildiv(a, 4) for a in (0, 1, 4, 5, 8, 9)] == [0, 1, 1, 2, 2, 3]
    assert [roundup_divisible(a, 4) for a in (1, 4, 5, 8, 9)] == [4, 4, 8, 8, 12]


def test_karmarkar_karp_differencing_beats_greedy():
    # Differencing by hand: 8-7=1; {6,5,4,1}: 6-5=1; {4,1,1}: 4-1=3; {3,1}: 3-1=2 -> sums 14/16.
    # Greedy (longest first to the lighter set): A=8, B=7, B=13, A=13, A=17 -> sums 13/17.
    lengths = [8, 7, 6, 5, 4]
    parts = karmarkar_karp(lengths, 2, equal_size=False)
    _assert_exact_cover(parts, 5)
    assert sorted(_sums(lengths, parts)) == [14, 16]
    greedy = greedy_partition(lengths, 2, equal_size=False)
    _assert_exact_cover(greedy, 5)
    assert sorted(_sums(lengths, greedy)) == [13, 17]


def test_karmarkar_karp_three_way_exact():
    # Three sets: {5,4}, {6,3}, {7,2} all sum to 9; differencing finds this exact split.
    lengths = [2, 3, 4, 5, 6, 7]
    parts = karmarkar_karp(lengths, 3, equal_size=True)
    _assert_exact_cover(parts, 6)
    assert sorted(_sums(lengths, parts)) == [9, 9, 9]


def test_equal_size_partitions_have_equal_counts_and_cover():
    rng = random.Random(0)
    lengths = [rng.randint(10, 2000) for _ in range(64)]
    parts = get_seqlen_balanced_partitions(lengths, k_partitions=8, equal_size=True)
    _assert_exact_cover(parts, 64)
    assert all(len(p) == 8 for p in parts)
    assert all(p == sorted(p) for p in parts)
    sums = _sums(lengths, parts)
    # Balanced far better than the naive consecutive split and within one max item of the mean.
    assert max(sums) - min(sums) <= max(lengths)
    metrics = log_seqlen_unbalance(lengths, parts, prefix="global_seqlen")
    assert metrics["global_seqlen/balanced_max"] == max(sums)
    assert metrics["global_seqlen/balanced_min"] == min(sums)
    assert metrics["global_seqlen/mean"] == pytest.approx(sum(lengths) / 8)
    assert (
        metrics["global_seqlen/balanced_max"] - metrics["global_seqlen/balanced_min"]
        <= metrics["global_seqlen/minmax_diff"]
    )


def test_log_seqlen_unbalance_hand_values():
    lengths = [1, 2, 3, 10]
    parts = [[0, 3], [1, 2]]  # sums 11 and 5
    m = log_seqlen_unbalance(lengths, parts, "p")
    # Consecutive blocks [1,2] -> 3 and [3,10] -> 13.
    assert m == {"p/min": 3, "p/max": 13, "p/minmax_diff": 10, "p/balanced_min": 5, "p/balanced_max": 11, "p/mean": 8.0}


def test_unequal_partitions_are_nonempty():
    lengths = [1000, 1, 1, 1]  # one huge item: the three others must still form non-empty sets
    parts = get_seqlen_balanced_partitions(lengths, 3, equal_size=False)
    _assert_exact_cover(parts, 4)
    assert all(len(p) > 0 for p in parts)
    assert [0] in parts


def test_greedy_equal_size_counts():
    lengths = [100, 1, 1, 1, 1, 1]
    parts = greedy_partition(lengths, 3, equal_size=True)
    _assert_exact_cover(parts, 6)
    assert [len(p) for p in parts] == [2, 2, 2]


def test_too_few_items_asserts():
    with pytest.raises(AssertionError):
        get_seqlen_balanced_partitions([1, 2], k_partitions=3, equal_size=False)


def _batch(lengths, seq_len):
    bs = len(lengths)
    mask = torch.zeros(bs, seq_len, dtype=torch.long)
    for i, n in enumerate(lengths):
        mask[i, seq_len - n :] = 1
    ids = torch.arange(bs * seq_len).view(bs, seq_len)
    return TensorDict({"attention_mask": mask, "input_ids": ids}, batch_size=[bs])


def test_rearrange_micro_batches_respects_budget_and_round_trips():
    rng = random.Random(1)
    lengths = [rng.randint(1, 16) for _ in range(20)]
    batch = _batch(lengths, seq_len=16)
    micro_batches, idx = rearrange_micro_batches(batch, max_token_len=40)
    assert len(micro_batches) >= ceildiv(sum(lengths), 40)
    for mb, p in zip(micro_batches, idx):
        assert int(mb["attention_mask"].sum()) <= 40
        assert p == sorted(p)
        assert torch.equal(mb["input_ids"], batch["input_ids"][torch.tensor(p)])
    flat = [i for p in idx for i in p]
    _assert_exact_cover(idx, 20)
    rev = torch.tensor(get_reverse_idx(flat))
    restored = torch.cat([mb["input_ids"] for mb in micro_batches])[rev]
    assert torch.equal(restored, batch["input_ids"])


def test_rearrange_adds_micro_batches_when_ceiling_is_not_enough():
    # ceil(18 / 9) = 2 micro batches, but three rows of 6 tokens cannot fit 9 tokens in 2 sets.
    batch = _batch([6, 6, 6], seq_len=8)
    micro_batches, idx = rearrange_micro_batches(batch, max_token_len=9)
    assert len(micro_batches) == 3
    assert all(int(mb["attention_mask"].sum()) <= 9 for mb in micro_batches)


def test_rearrange_min_num_and_divisible():
    batch = _batch([4] * 8, seq_len=4)
    mbs, _ = rearrange_micro_batches(batch, max_token_len=32, min_num_micro_batch=3)
    assert len(mbs) == 3
    mbs, _ = rearrange_micro_batches(batch, max_token_len=32, num_batches_divided_by=4)
    assert len(mbs) == 4


def test_rearrange_budget_below_seq_len_asserts():
    with pytest.raises(AssertionError, match="max_token_len"):
        rearrange_micro_batches(_batch([3, 3], seq_len=8), max_token_len=7)


def test_get_reverse_idx():
    assert get_reverse_idx([2, 0, 3, 1]) == [1, 3, 0, 2]
