"""Tests for verl.utils.torch_functional: masked ops, log-probs/entropy, padding, unpadding, schedules."""

import contextlib
import math

import pytest
import torch
import torch.nn.functional as F
from hypothesis import given, settings
from hypothesis import strategies as st
from tensordict import TensorDict

from verl.utils import torch_functional as verl_F


# ---------------------------------------------------------------- masked ops
def test_masked_mean_sum_by_hand():
    values = torch.tensor([[1.0, 2.0, 3.0, 4.0], [10.0, 20.0, 30.0, 40.0]])
    mask = torch.tensor([[1, 1, 0, 0], [1, 0, 0, 0]])
    assert verl_F.masked_sum(values, mask).item() == 13.0
    assert verl_F.masked_mean(values, mask).item() == pytest.approx(13.0 / 3)
    assert torch.allclose(verl_F.masked_mean(values, mask, axis=-1), torch.tensor([1.5, 10.0]))
    assert torch.allclose(verl_F.masked_sum(values, mask, axis=0), torch.tensor([11.0, 2.0, 0.0, 0.0]))


def test_masked_mean_shape_mismatch_names_shapes():
    with pytest.raises(ValueError, match=r"mask shape \(3,\).*values shape \(2, 4\)"):
        verl_F.masked_mean(torch.zeros(2, 4), torch.ones(3))


def test_masked_var_by_hand_and_errors():
    values = torch.tensor([1.0, 2.0, 3.0, 100.0])
    mask = torch.tensor([1.0, 1.0, 1.0, 0.0])
    # mean 2, squared deviations 1, 0, 1 -> biased 2/3, unbiased 1
    assert verl_F.masked_var(values, mask).item() == pytest.approx(1.0, rel=1e-6)
    assert verl_F.masked_var(values, mask, unbiased=False).item() == pytest.approx(2 / 3, rel=1e-6)
    with pytest.raises(ValueError, match="At least one element"):
        verl_F.masked_var(values, torch.zeros(4))
    with pytest.raises(ValueError, match="sum of the mask is one"):
        verl_F.masked_var(values, torch.tensor([0.0, 1.0, 0.0, 0.0]))


def test_masked_whiten_by_hand():
    values = torch.tensor([[1.0, 2.0, 3.0, -50.0]])
    mask = torch.tensor([[1, 1, 1, 0]])
    out = verl_F.masked_whiten(values, mask)
    assert torch.allclose(out[0, :3], torch.tensor([-1.0, 0.0, 1.0]), atol=1e-6)
    out = verl_F.masked_whiten(values, mask, shift_mean=False)
    assert torch.allclose(out[0, :3], torch.tensor([1.0, 2.0, 3.0]), atol=1e-6)


@settings(max_examples=40, deadline=None)
@given(
    rows=st.integers(1, 4),
    cols=st.integers(2, 6),
    seed=st.integers(0, 10_000),
    junk=st.floats(-1e3, 1e3),
)
def test_masked_ops_ignore_padding(rows, cols, seed, junk):
    g = torch.Generator().manual_seed(seed)
    values = torch.randn(rows, cols, generator=g, dtype=torch.float64)
    mask = (torch.rand(rows, cols, generator=g) > 0.4).long()
    mask[0, 0] = mask[0, 1] = 1  # at least two kept elements so the unbiased variance is defined
    poisoned = torch.where(mask.bool(), values, torch.full_like(values, junk))
    for fn in (verl_F.masked_mean, verl_F.masked_var):
        assert torch.allclose(fn(values, mask), fn(poisoned, mask))
    a, b = verl_F.masked_whiten(values, mask), verl_F.masked_whiten(poisoned, mask)
    assert torch.allclose(a[mask.bool()], b[mask.bool()])
    # whitened values have zero mean and unit (unbiased) variance over the mask
    assert verl_F.masked_mean(a, mask).abs().item() < 1e-6
    if mask.sum() > 1 and verl_F.masked_var(values, mask) > 1e-4:
        assert verl_F.masked_var(a, mask).item() == pytest.approx(1.0, rel=1e-4)


def test_clip_by_value_numbers_and_tensors():
    x = torch.tensor([-2.0, 0.5, 3.0])
    assert torch.equal(verl_F.clip_by_value(x, -1.0, 1.0), torch.tensor([-1.0, 0.5, 1.0]))
    lo, hi = torch.tensor([-3.0, 1.0, 0.0]), torch.tensor([-1.0, 2.0, 2.5])
    assert torch.equal(verl_F.clip_by_value(x, lo, hi), torch.tensor([-2.0, 1.0, 2.5]))


def test_get_response_mask_includes_first_eos():
    ids = torch.tensor([[5, 2, 7, 2], [2, 0, 0, 0], [1, 1, 1, 1], [9, 7, 2, 2]])
    expected = torch.tensor([[1, 1, 0, 0], [1, 0, 0, 0], [1, 1, 1, 1], [1, 1, 1, 0]])
    assert torch.equal(verl_F.get_response_mask(ids, eos_token=2), expected)
    multi = verl_F.get_response_mask(ids, eos_token=[2, 7], dtype=torch.float32)
    assert torch.equal(multi, torch.tensor([[1.0, 1, 0, 0], [1, 0, 0, 0], [1, 1, 1, 1], [1, 1, 0, 0]]))
    assert verl_F.get_eos_mask is verl_F.get_response_mask


# ---------------------------------------------------------------- log-probs and entropy
def test_logprobs_and_entropy_by_hand():
    logits = torch.tensor([[0.0, math.log(3.0)], [0.0, 0.0]])
    lp = verl_F.logprobs_from_logits(logits, torch.tensor([1, 0]))
    assert torch.allclose(lp, torch.tensor([math.log(0.75), math.log(0.5)]))
    ent = verl_F.entropy_from_logits(logits)
    h = -(0.25 * math.log(0.25) + 0.75 * math.log(0.75))
    assert torch.allclose(ent, torch.tensor([h, math.log(2.0)]))
    assert torch.allclose(verl_F.entropy_from_logits(torch.zeros(3, 4)), torch.full((3,), math.log(4.0)))
    assert torch.equal(verl_F.gather_from_labels(logits, torch.tensor([1, 0])), torch.tensor([math.log(3.0), 0.0]))


def _chunked_cases(test):
    """Random (bs, seq, vocab) logits cut into ``chunk``-row blocks."""
    return settings(max_examples=25, deadline=None)(
        given(
            bs=st.integers(1, 3),
            seq=st.integers(2, 6),
            vocab=st.integers(2, 17),
            chunk=st.integers(1, 5),
            seed=st.integers(0, 10_000),
        )(test)
    )


def _random_case(bs: int, seq: int, vocab: int, seed: int):
    """float64 logits ``(bs, seq + 1, vocab)``, labels and loss weights ``(bs, seq)``."""
    g = torch.Generator().manual_seed(seed)
    base = torch.randn(bs, seq + 1, vocab, generator=g, dtype=torch.float64) * 3
    return base, torch.randint(0, vocab, (bs, seq), generator=g), torch.randn(bs, seq, generator=g, dtype=torch.float64)


@contextlib.contextmanager
def _chunk_elements(elements: int):
    old = verl_F._CHUNK_ELEMENTS
    verl_F._CHUNK_ELEMENTS = elements
    try:
        yield
    finally:
        verl_F._CHUNK_ELEMENTS = old


@_chunked_cases
def test_chunked_logprob_entropy_match_naive_with_grads(bs, seq, vocab, chunk, seed):
    base, labels, weights = _random_case(bs, seq, vocab, seed)
    with _chunk_elements(chunk * vocab):  # several chunks
        ours_in = base.clone().requires_grad_(True)
        sliced = ours_in[:, :-1]  # non-contiguous view, as the actor slices logits[:, -T-1:-1]
        lp = verl_F.logprobs_from_logits(sliced, labels)
        ent = verl_F.entropy_from_logits(sliced)
        ((lp + 0.3 * ent) * weights).sum().backward()

    ref_in = base.clone().requires_grad_(True)
    ref_logits = ref_in[:, :-1]
    ref_lp = verl_F.logprobs_from_logits_naive(ref_logits, labels)
    p = F.softmax(ref_logits, -1)
    ref_ent = torch.logsumexp(ref_logits, -1) - (p * ref_logits).sum(-1)
    ((ref_lp + 0.3 * ref_ent) * weights).sum().backward()

    assert torch.allclose(lp, ref_lp, atol=1e-10)
    assert torch.allclose(ent, ref_ent, atol=1e-10)
    assert torch.allclose(ours_in.grad, ref_in.grad, atol=1e-10)
    assert (ent >= -1e-12).all() and (ent <= math.log(vocab) + 1e-9).all()


@_chunked_cases
def test_logprobs_with_metric_entropy_in_one_pass(bs, seq, vocab, chunk, seed):
    """The fused pass gives the same log-probs (and gradients) as the naive form and the entropy as a value only."""
    base, labels, weights = _random_case(bs, seq, vocab, seed)
    with _chunk_elements(chunk * vocab):  # several chunks
        ours_in = base.clone().requires_grad_(True)
        lp, ent = verl_F.logprobs_and_entropy_from_logits(ours_in[:, :-1], labels)  # a non-contiguous view
        (lp * weights).sum().backward()

    ref_in = base.clone().requires_grad_(True)
    ref_logits = ref_in[:, :-1]
    ref_lp = verl_F.logprobs_from_logits_naive(ref_logits, labels)
    (ref_lp * weights).sum().backward()
    ref_ent = -(F.softmax(ref_logits, -1) * F.log_softmax(ref_logits, -1)).sum(-1)

    assert lp.dtype == ent.dtype == torch.float64 and not ent.requires_grad
    assert torch.allclose(lp, ref_lp, atol=1e-10)
    assert torch.allclose(ent, ref_ent.detach(), atol=1e-10)
    assert torch.allclose(ours_in.grad, ref_in.grad, atol=1e-10)


def test_logprobs_with_metric_entropy_bf16_and_by_hand():
    logits = torch.tensor([[0.0, math.log(3.0)], [0.0, 0.0]])
    lp, ent = verl_F.logprobs_and_entropy_from_logits(logits, torch.tensor([1, 0]))
    h = -(0.25 * math.log(0.25) + 0.75 * math.log(0.75))
    assert torch.allclose(lp, torch.tensor([math.log(0.75), math.log(0.5)]))
    assert torch.allclose(ent, torch.tensor([h, math.log(2.0)]))
    # bf16 logits: both in float32, from the bf16 values
    g = torch.Generator().manual_seed(0)
    xb = (torch.randn(5, 7, 300, generator=g) * 4).bfloat16()
    labels = torch.randint(0, 300, (5, 7), generator=g)
    lp, ent = verl_F.logprobs_and_entropy_from_logits(xb, labels)
    x32 = xb.float()
    assert lp.dtype == ent.dtype == torch.float32
    # float32 sums over 300 terms, in another order than the naive form's
    assert torch.allclose(lp, verl_F.logprobs_from_logits_naive(x32, labels), atol=1e-5)
    assert torch.allclose(ent, -(F.softmax(x32, -1) * F.log_softmax(x32, -1)).sum(-1), atol=1e-4)


def test_entropy_with_chunking_and_bf16():
    x = torch.randn(9, 11)
    assert torch.allclose(verl_F.entropy_from_logits_with_chunking(x, chunk_size=2), verl_F.entropy_from_logits(x))
    xb = x.bfloat16()
    assert verl_F.entropy_from_logits(xb).dtype == torch.bfloat16
    lp = verl_F.logprobs_from_logits(xb, torch.arange(9))
    assert lp.dtype == torch.float32  # computed and returned in float32, not in bf16
    assert torch.allclose(lp, verl_F.logprobs_from_logits_naive(xb.float(), torch.arange(9)), atol=1e-6)


def test_log_probs_from_logits_response():
    logits = torch.randn(2, 5, 7)
    ids = torch.randint(0, 7, (2, 5))
    out = verl_F.log_probs_from_logits_response(ids, logits, response_length=2)
    ref = F.log_softmax(logits, -1)
    assert out.shape == (2, 2)
    assert torch.allclose(out[1, 0], ref[1, 2, ids[1, 3]]) and torch.allclose(out[0, 1], ref[0, 3, ids[0, 4]])


def test_post_process_logits_divides_in_place():
    logits = torch.tensor([2.0, 4.0])
    out = verl_F.post_process_logits(None, logits, temperature=2.0, top_k=5, top_p=0.5)
    assert out is logits and torch.equal(logits, torch.tensor([1.0, 2.0]))


# ---------------------------------------------------------------- padding
def test_pad_2d_list_to_length():
    assert torch.equal(verl_F.pad_2d_list_to_length([[1, 2], [3]], 0), torch.tensor([[1, 2], [3, 0]]))
    out = verl_F.pad_2d_list_to_length([[1, 2], [3]], 9, max_length=4)
    assert torch.equal(out, torch.tensor([[1, 2, 9, 9], [3, 9, 9, 9]]))
    assert verl_F.pad_2d_list_to_length([[1, 2, 3]], 0, max_length=2).shape == (1, 3)


def test_pad_sequence_to_length():
    x = torch.tensor([[1, 2]])
    assert torch.equal(verl_F.pad_sequence_to_length(x, 4, 0), torch.tensor([[1, 2, 0, 0]]))
    assert torch.equal(verl_F.pad_sequence_to_length(x, 4, 7, left_pad=True), torch.tensor([[7, 7, 1, 2]]))
    assert verl_F.pad_sequence_to_length(x, 1, 0) is x


def test_postprocess_data_pad_and_truncate():
    ids, mask = torch.tensor([[1, 2, 3, 4, 5]]), torch.ones(1, 5, dtype=torch.long)
    out_ids, out_mask = verl_F.postprocess_data(ids, mask, 7, pad_token_id=0)
    assert torch.equal(out_ids, torch.tensor([[0, 0, 1, 2, 3, 4, 5]]))
    assert torch.equal(out_mask, torch.tensor([[0, 0, 1, 1, 1, 1, 1]]))
    out_ids, _ = verl_F.postprocess_data(ids, mask, 6, pad_token_id=0, left_pad=False)
    assert torch.equal(out_ids, torch.tensor([[1, 2, 3, 4, 5, 0]]))
    cases = {"left": [[3, 4, 5]], "right": [[1, 2, 3]], "middle": [[1, 4, 5]]}
    for mode, expected in cases.items():
        out_ids, out_mask = verl_F.postprocess_data(ids, mask, 3, 0, truncation=mode)
        assert torch.equal(out_ids, torch.tensor(expected)), mode
        assert out_mask.shape == (1, 3)
    with pytest.raises(NotImplementedError, match="max_length 3"):
        verl_F.postprocess_data(ids, mask, 3, 0, truncation="error")
    with pytest.raises(AssertionError, match="truncation"):
        verl_F.postprocess_data(ids, mask, 3, 0, truncation="bogus")
    with pytest.raises(AssertionError, match="2-D"):
        verl_F.postprocess_data(ids[0], mask[0], 3, 0)


def test_tokenize_and_postprocess_data():
    class CharTokenizer:
        def __call__(self, text, return_tensors=None, add_special_tokens=True):
            assert add_special_tokens is False and return_tensors == "pt"
            ids = torch.tensor([[ord(c) for c in text]])
            return {"input_ids": ids, "attention_mask": torch.ones_like(ids)}

    ids, mask = verl_F.tokenize_and_postprocess_data("ab", CharTokenizer(), max_length=4, pad_token_id=0)
    assert torch.equal(ids, torch.tensor([[0, 0, 97, 98]])) and torch.equal(mask, torch.tensor([[0, 0, 1, 1]]))


def test_remove_pad_token():
    ids = torch.tensor([[0, 0, 5, 6], [7, 8, 9, 1]])
    mask = torch.tensor([[0, 0, 1, 1], [1, 1, 1, 1]])
    assert verl_F.remove_pad_token(ids, mask) == [[5, 6], [7, 8, 9, 1]]


# ---------------------------------------------------------------- remove padding
def test_unpad_pad_round_trip():
    mask = torch.tensor([[0, 1, 1, 0], [1, 1, 1, 1], [0, 0, 1, 0]])
    hidden = torch.arange(3 * 4 * 2, dtype=torch.float32).view(3, 4, 2)
    indices, cu, max_len = verl_F.get_unpad_data(mask)
    assert indices.tolist() == [1, 2, 4, 5, 6, 7, 10]
    assert cu.tolist() == [0, 2, 6, 7] and cu.dtype == torch.int32 and max_len == 4
    packed, idx, cu2, max2, seqlens = verl_F.unpad_input(hidden, mask)
    assert packed.shape == (7, 2) and torch.equal(packed[0], hidden[0, 1]) and torch.equal(packed[-1], hidden[2, 2])
    assert seqlens.tolist() == [2, 4, 1] and torch.equal(cu2, cu) and max2 == 4
    back = verl_F.pad_input(packed, idx, 3, 4)
    assert torch.equal(back, hidden * mask.unsqueeze(-1))


def test_rmpad_log_probs_match_padded():
    torch.manual_seed(0)
    bs, seqlen, vocab, resp = 2, 6, 11, 3
    ids = torch.randint(0, vocab, (bs, seqlen))
    mask = torch.tensor([[0, 1, 1, 1, 1, 1], [0, 0, 1, 1, 1, 0]])
    logits = torch.randn(bs, seqlen, vocab)
    packed_logits, indices, *_ = verl_F.unpad_input(logits, mask)
    out = verl_F.log_probs_from_logits_response_rmpad(ids, mask, packed_logits, resp)
    ref = verl_F.log_probs_from_logits_response(ids, logits, resp)
    resp_mask = mask[:, -resp:].bool()
    assert out.shape == (bs, resp)
    # a position's log-prob is defined when it and its successor are both kept tokens
    valid = resp_mask & mask[:, -resp - 1 : -1].bool()
    assert torch.allclose(out[valid], ref[valid], atol=1e-6)
    ids_rmpad, _, *_ = verl_F.unpad_input(ids.unsqueeze(-1), mask)
    out2 = verl_F.log_probs_from_logits_all_rmpad(ids_rmpad.transpose(0, 1), packed_logits, indices, bs, seqlen, resp)
    assert torch.allclose(out2, out)


# ---------------------------------------------------------------- grads and dict helpers
def test_compute_grad_norm_is_sum_of_squares():
    model = torch.nn.Linear(2, 1, bias=True)
    model.weight.grad = torch.tensor([[3.0, 4.0]])
    model.bias.grad = None
    assert verl_F.compute_grad_norm(model) == pytest.approx(25.0)


def test_split_dict_tensor_into_batches():
    td = TensorDict({"a": torch.arange(6)}, batch_size=[6])
    parts = verl_F.split_dict_tensor_into_batches(td, 2)
    assert [p["a"].tolist() for p in parts] == [[0, 1], [2, 3], [4, 5]]
    with pytest.raises(AssertionError, match="batch size: 6"):
        verl_F.split_dict_tensor_into_batches(td, 4)


def test_distributed_stats_single_process():
    x = torch.tensor([1.0, 2.0, 3.0, 4.0])
    mean, mx, mn, std = verl_F.distributed_mean_max_min_std(x)
    assert mean.item() == 2.5 and mx.item() == 4.0 and mn.item() == 1.0
    assert std.item() == pytest.approx(math.sqrt(5 / 3))
    assert verl_F.distributed_mean_max_min_std(x, False, False, False)[1:] == (None, None, None)
    assert verl_F.distributed_masked_mean(x, torch.tensor([1, 0, 0, 1])).item() == 2.5


# ---------------------------------------------------------------- LR schedules
def _factors(make, steps):
    opt = torch.optim.SGD([torch.nn.Parameter(torch.zeros(1))], lr=1.0)
    sched = make(opt)
    out = []
    for _ in range(steps):
        out.append(opt.param_groups[0]["lr"])
        opt.step()
        sched.step()
    return out


def test_constant_schedule_with_warmup():
    f = _factors(lambda o: verl_F.get_constant_schedule_with_warmup(o, 4), 6)
    assert f == pytest.approx([0.0, 0.25, 0.5, 0.75, 1.0, 1.0])


def test_cosine_schedule_with_warmup():
    f = _factors(lambda o: verl_F.get_cosine_schedule_with_warmup(o, 2, 6, min_lr_ratio=0.1), 7)
    # warmup 0.1 -> 0.55, then 0.45 * cos(pi * p) + 0.55 over 4 steps: p = 0, .25, .5, .75, 1
    expected = [0.1, 0.55] + [max(0.1, 0.45 * math.cos(math.pi * p) + 0.55) for p in (0, 0.25, 0.5, 0.75, 1.0)]
    assert f == pytest.approx(expected)
    assert f[2] == pytest.approx(1.0) and f[-1] == pytest.approx(0.1)
    assert _factors(lambda o: verl_F.get_cosine_schedule_with_warmup(o, 0, 4, min_lr_ratio=None), 1) == [1.0]
    with pytest.raises(ValueError, match="min_lr_ratio"):
        _factors(lambda o: verl_F.get_cosine_schedule_with_warmup(o, 0, 4, min_lr_ratio=1.5), 1)


def test_wsd_schedule_with_warmup():
    # total 12, warmup 2 -> 10 left, stable int(10 * 0.8) = 8, decay 2
    f = _factors(lambda o: verl_F.get_wsd_schedule_with_warmup(o, 2, 12, min_lr_ratio=0.2, stable_ratio=0.8), 14)
    decay_mid = 0.8 * 0.5 * (1 + math.cos(math.pi * 0.5)) + 0.2
    assert f == pytest.approx([0.0, 0.5] + [1.0] * 8 + [1.0, decay_mid, 0.2, 0.2])
