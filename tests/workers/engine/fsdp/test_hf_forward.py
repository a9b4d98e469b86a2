"""Packing/unpacking and the trimmed padded forward of the FSDP engine."""

import torch
from transformers import Qwen2Config, Qwen2ForCausalLM

import verl.workers.engine.fsdp.hf_forward as mb
from verl.utils.model import compute_position_id_with_mask


def _padded(bs=4, seqlen=7):
    mask = torch.tensor([[0, 0, 1, 1, 1, 1, 0], [1, 1, 1, 1, 1, 1, 1], [0, 0, 0, 0, 1, 0, 0], [0, 1, 1, 1, 0, 0, 0]])
    ids = torch.arange(bs * seqlen).view(bs, seqlen) * mask
    return ids, mask, compute_position_id_with_mask(mask)


def test_pack_unpack_round_trip_and_restarting_positions():
    ids, mask, pos = _padded()
    ids_rmpad, pos_rmpad, valid = mb.pack_padded_inputs(ids, mask, pos)
    assert ids_rmpad.shape == (1, int(mask.sum()))
    assert pos_rmpad.tolist() == [[0, 1, 2, 3, 0, 1, 2, 3, 4, 5, 6, 0, 0, 1, 2]]
    back = mb.unpack_to_padded(ids_rmpad[0], valid)
    assert torch.equal(back, ids)
    mrope = pos.unsqueeze(1).expand(-1, 3, -1)
    _, pos3, _ = mb.pack_padded_inputs(ids, mask, mrope)
    # mrope packs to (4, 1, nnz): the text positions (restarting per sequence) first, then the three rope rows
    assert pos3.shape == (4, 1, int(mask.sum())) and torch.equal(pos3[0], pos_rmpad) and torch.equal(pos3[2], pos_rmpad)


def test_explicit_block_mask_fallback_is_exact(monkeypatch):
    # Older transformers cannot isolate packed sequences by position ids; the fallback mask must be exact.
    torch.manual_seed(0)
    cfg = Qwen2Config(
        vocab_size=64, hidden_size=32, num_hidden_layers=1, num_attention_heads=4, num_key_value_heads=2,
        intermediate_size=64, attn_implementation="eager",
    )  # fmt: skip
    model = Qwen2ForCausalLM(cfg).eval()
    ids, mask, pos = _padded()
    ids = ids % 64
    ids_rmpad, pos_rmpad, valid = mb.pack_padded_inputs(ids, mask, pos)
    monkeypatch.setattr(mb, "_hf_packed_detection", None)
    kwargs = mb.packed_forward_kwargs(model, pos_rmpad, torch.float32)
    assert kwargs["attention_mask"].shape == (1, 1, ids_rmpad.shape[1], ids_rmpad.shape[1])
    with torch.no_grad():
        packed = model(input_ids=ids_rmpad, **kwargs).logits[0]
        padded = model(input_ids=ids, attention_mask=mask, position_ids=pos).logits
    torch.testing.assert_close(packed, padded[valid], rtol=1e-5, atol=1e-5)


def test_trim_padding_columns_keeps_every_used_column_and_the_prompt_edge():
    # prompt width 4, response width 3; column 0 and the last response column hold padding in every row
    mask = torch.tensor([[0, 1, 1, 1, 1, 0, 0], [0, 0, 1, 1, 1, 1, 0]])
    ids = torch.arange(14).view(2, 7) * mask
    pos = compute_position_id_with_mask(mask)
    t_ids, t_mask, t_pos, kept = mb.trim_padding_columns(ids, mask, pos, response_length=3)
    assert kept == 2 and torch.equal(t_mask, mask[:, 1:6]) and torch.equal(t_ids, ids[:, 1:6])
    assert torch.equal(t_pos, pos[:, 1:6])  # positions are kept, not renumbered
    # a response column used by one row stays; the prompt's last column always stays (it predicts token 0)
    empty_responses = torch.tensor([[0, 0, 1, 1, 0, 0, 0]])
    _, t_mask, _, kept = mb.trim_padding_columns(empty_responses, empty_responses, empty_responses, 3)
    assert kept == 0 and t_mask.shape[-1] == 2
    mrope = pos.unsqueeze(1).expand(2, 3, 7)  # (b, 3, L) rope index of vision-language models
    assert mb.trim_padding_columns(ids, mask, mrope, 3)[2].shape == (2, 3, 5)


def test_response_logits_only_gives_the_response_positions_logits_exactly():
    # logits_to_keep computes the lm-head only where log-probs are read: the last kept + 1 positions
    torch.manual_seed(0)
    cfg = Qwen2Config(
        vocab_size=64, hidden_size=32, num_hidden_layers=1, num_attention_heads=4, num_key_value_heads=2,
        intermediate_size=64,
    )  # fmt: skip
    model = Qwen2ForCausalLM(cfg).eval()
    mask = torch.tensor([[0, 1, 1, 1, 1, 0, 0], [0, 0, 1, 1, 1, 1, 0]])
    ids, pos = (torch.arange(14).view(2, 7) * mask) % 64, compute_position_id_with_mask(mask)
    with torch.no_grad():
        full, kept = mb.padded_forward(model, ids, mask, pos, response_length=3)
        only, kept_only = mb.padded_forward(model, ids, mask, pos, response_length=3, response_logits_only=True)
    assert kept == kept_only == 2
    assert only.logits.shape[1] == kept + 1 < full.logits.shape[1]
    assert torch.equal(only.logits, full.logits[:, -kept - 1 :])
    # a model without logits_to_keep (a critic's value head) gets the full forward
    assert not mb.takes_logits_to_keep(torch.nn.Linear(2, 2))


def test_packed_response_positions_are_the_packed_indices_that_predict_response_tokens():
    # prompt width 4, response width 3 (the _padded rows); packed row: 4 + 7 + 1 + 3 tokens
    ids, mask, pos = _padded()
    _, _, valid = mb.pack_padded_inputs(ids, mask, pos)
    read, slots = mb.packed_response_positions(valid, response_length=3)
    # columns 3, 4, 5 predict the response slots 0, 1, 2. Row 0 holds packed 0-3 (columns 2-5), row 1 packed 4-10,
    # row 2 packed 11 (column 4: it predicts slot 1), row 3 packed 12-14 (columns 1-3)
    assert read.tolist() == [1, 2, 3, 7, 8, 9, 11, 14]
    assert slots.tolist() == [[True, True, True], [True, True, True], [False, True, False], [True, False, False]]
    values = torch.arange(15.0)
    assert mb.unpack_to_padded(values[read], slots).tolist() == [[1, 2, 3], [7, 8, 9], [0, 11, 0], [14, 0, 0]]
