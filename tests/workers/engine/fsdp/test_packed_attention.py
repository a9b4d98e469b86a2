"""Attention over a packed row, per sequence: the same values and gradients as the block-diagonal mask, and no
attention over the whole row."""

import pytest
import torch
import torch.nn.functional as F
from transformers import AttentionInterface, Qwen2Config, Qwen2ForCausalLM

import verl.workers.engine.fsdp.hf_forward as hf_forward
from verl.utils.model import compute_position_id_with_mask
from verl.workers.engine.fsdp.packed_attention import packed_sequence_kwargs, per_sequence


class _Attention(torch.nn.Module):
    is_causal = True
    num_key_value_groups = 2


def _sdpa(module, query, key, value, attention_mask, is_causal=None, **kwargs):
    """transformers' attention-function contract over torch's sdpa: out ``(b, q, heads, d)``."""
    out = F.scaled_dot_product_attention(
        query, key, value, attn_mask=attention_mask, is_causal=bool(is_causal) and attention_mask is None,
        enable_gqa=True,
    )  # fmt: skip
    return out.transpose(1, 2), None


def _block_mask(lengths: list[int]) -> torch.Tensor:
    seq = torch.repeat_interleave(torch.arange(len(lengths)), torch.tensor(lengths))
    idx = torch.arange(seq.numel())
    return ((seq[:, None] == seq[None, :]) & (idx[:, None] >= idx[None, :]))[None, None]


def _positions(lengths: list[int]) -> torch.Tensor:
    return torch.cat([torch.arange(n) for n in lengths]).unsqueeze(0)


def test_packed_sequence_kwargs_are_the_offsets_of_each_sequence():
    kwargs = packed_sequence_kwargs(_positions([4, 7, 1, 3]))
    assert kwargs["cu_seq_lens_q"].tolist() == [0, 4, 11, 12, 15] and kwargs["cu_seq_lens_q"].dtype == torch.int32
    assert kwargs["cu_seq_lens_k"] is kwargs["cu_seq_lens_q"]
    assert kwargs["max_length_q"] == kwargs["max_length_k"] == 7
    # a row that starts inside a sequence counts its head as one
    assert packed_sequence_kwargs(torch.tensor([[5, 6, 0, 1]]))["cu_seq_lens_q"].tolist() == [0, 2, 4]


def test_per_sequence_equals_the_block_diagonal_mask_and_batches_runs_of_equal_length():
    torch.manual_seed(0)
    lengths = [3, 3, 5, 2, 2, 2, 1]
    nnz = sum(lengths)
    q = torch.randn(1, 4, nnz, 8, dtype=torch.float64, requires_grad=True)
    k = torch.randn(1, 2, nnz, 8, dtype=torch.float64, requires_grad=True)
    v = torch.randn(1, 2, nnz, 8, dtype=torch.float64, requires_grad=True)
    calls = []

    def spy(module, query, key, value, attention_mask, **kwargs):
        calls.append((query.shape[0], query.shape[2], attention_mask, sorted(kwargs)))
        return _sdpa(module, query, key, value, attention_mask, **kwargs)

    module = _Attention()
    want, _ = _sdpa(module, q, k, v, _block_mask(lengths))
    varlen = packed_sequence_kwargs(_positions(lengths))
    got, weights = per_sequence(spy)(module, q, k, v, _block_mask(lengths), position_ids=_positions(lengths), **varlen)
    assert weights is None and got.shape == want.shape == (1, nnz, 4, 8)
    torch.testing.assert_close(got, want)
    # one call per run of neighbouring sequences of one length, each a causal batch without a mask
    assert [(b, n) for b, n, _, _ in calls] == [(2, 3), (1, 5), (3, 2), (1, 1)]
    assert all(mask is None and names == ["is_causal"] for _, _, mask, names in calls)
    grad_out = torch.randn_like(want)
    got_grads = torch.autograd.grad(got, (q, k, v), grad_out)
    want_grads = torch.autograd.grad(want, (q, k, v), grad_out)
    for g, w in zip(got_grads, want_grads, strict=True):
        torch.testing.assert_close(g, w)


@pytest.mark.parametrize("case", ["no varlen keywords", "batch of two", "not causal", "sliding window"])
def test_other_calls_pass_through_unchanged(case):
    torch.manual_seed(0)
    q, k, v = torch.randn(1, 4, 6, 8), torch.randn(1, 2, 6, 8), torch.randn(1, 2, 6, 8)
    module, kwargs = _Attention(), dict(packed_sequence_kwargs(_positions([2, 4])))
    if case == "no varlen keywords":
        kwargs = {}
    elif case == "batch of two":
        q, k, v = (t.expand(2, -1, -1, -1) for t in (q, k, v))
    elif case == "not causal":
        module.is_causal = False
    else:
        kwargs["sliding_window"] = 4
    seen = []
    per_sequence(lambda *a, **kw: seen.append((a, kw)) or (None, None))(module, q, k, v, "mask", **kwargs)
    (args, passed), = seen  # fmt: skip
    assert args[1] is q and args[4] == "mask" and passed == kwargs


def _tiny_lm(impl: str) -> Qwen2ForCausalLM:
    torch.manual_seed(0)
    cfg = Qwen2Config(
        vocab_size=64, hidden_size=32, num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2,
        intermediate_size=64, attn_implementation=impl,
    )  # fmt: skip
    return Qwen2ForCausalLM(cfg)


def test_packed_model_forward_attends_per_sequence_and_equals_the_padded_forward(monkeypatch):
    model = _tiny_lm("sdpa")
    mask = torch.tensor([[0, 0, 1, 1, 1, 1, 0], [1, 1, 1, 1, 1, 1, 1], [0, 0, 0, 0, 1, 0, 0], [0, 1, 1, 1, 0, 0, 0]])
    ids = (torch.arange(28).view(4, 7) * 7 % 64) * mask
    pos = compute_position_id_with_mask(mask)
    ids_rmpad, pos_rmpad, valid = hf_forward.pack_padded_inputs(ids, mask, pos)
    kwargs = hf_forward.packed_forward_kwargs(model, pos_rmpad, torch.float32)
    assert kwargs["cu_seq_lens_q"].tolist() == [0, 4, 11, 12, 15]
    query_lengths = []
    sdpa = F.scaled_dot_product_attention

    def spy(query, *args, **kwargs):
        query_lengths.append(query.shape[-2])
        return sdpa(query, *args, **kwargs)

    monkeypatch.setattr(F, "scaled_dot_product_attention", spy)
    with torch.no_grad():
        packed = model(input_ids=ids_rmpad, **kwargs).logits[0]
    assert query_lengths and max(query_lengths) == 7  # never the whole row of 15
    with torch.no_grad():
        padded = model(input_ids=ids, attention_mask=mask, position_ids=pos).logits
    torch.testing.assert_close(packed, padded[valid], rtol=1e-5, atol=1e-5)
    # under Ulysses a rank holds a slice of the row: no boundaries go along
    assert "cu_seq_lens_q" not in hf_forward.packed_forward_kwargs(model, pos_rmpad, torch.float32, True)
    assert "cu_seq_lens_q" not in hf_forward.packed_forward_kwargs(_tiny_lm("eager"), pos_rmpad, torch.float32)
    assert getattr(AttentionInterface._global_mapping["sdpa"], "_verl_per_sequence", False)
