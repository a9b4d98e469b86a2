"""score_sequences: token-budget micro batches (reward_model.use_dynamic_bsz) and packed micro batches
(reward_model.model.use_remove_padding) give the padded fixed-size batches' scores."""

import pytest
import torch
from tensordict import TensorDict
from transformers import Qwen2Config, Qwen2ForTokenClassification

from verl.utils.model import compute_position_id_with_mask
from verl.workers.engine.fsdp.hf_forward import score_sequences


def _tiny_reward_model(attn_implementation: str = "sdpa") -> Qwen2ForTokenClassification:
    torch.manual_seed(0)
    cfg = Qwen2Config(vocab_size=64, hidden_size=32, num_hidden_layers=2, num_attention_heads=2,
                      num_key_value_heads=1, intermediate_size=64, num_labels=1,
                      attn_implementation=attn_implementation)  # fmt: skip
    return Qwen2ForTokenClassification(cfg).eval()


def _left_padded(lengths: list[int], width: int = 10) -> TensorDict:
    mask = torch.zeros(len(lengths), width, dtype=torch.long)
    for row, n in enumerate(lengths):
        mask[row, width - n :] = 1
    ids = torch.randint(1, 64, mask.shape) * mask
    return TensorDict(
        {"input_ids": ids, "attention_mask": mask, "position_ids": compute_position_id_with_mask(mask)},
        batch_size=[len(lengths)],
    )


def _prompt_and_response(prompt_lens: list[int], response_lens: list[int], prompt: int, response: int) -> TensorDict:
    """verl's rollout layout: prompts left-padded to ``prompt``, responses right-padded to ``response``."""
    mask = torch.zeros(len(prompt_lens), prompt + response, dtype=torch.long)
    for row, (p, r) in enumerate(zip(prompt_lens, response_lens, strict=True)):
        mask[row, prompt - p : prompt + r] = 1
    ids = torch.randint(1, 64, mask.shape, generator=torch.Generator().manual_seed(1)) * mask
    return TensorDict(
        {"input_ids": ids, "attention_mask": mask, "position_ids": compute_position_id_with_mask(mask)},
        batch_size=[len(prompt_lens)],
    )


def test_dynamic_micro_batches_keep_scores_and_row_order():
    model = _tiny_reward_model()
    inputs = _left_padded([9, 2, 5, 7, 3, 8])
    with torch.no_grad():
        fixed = score_sequences(model, inputs, micro_batch_size=1)
        dynamic = score_sequences(model, inputs, micro_batch_size=1, max_token_len=12)
    torch.testing.assert_close(dynamic, fixed, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("attn_implementation", ["sdpa", "eager"])
def test_packed_micro_batches_give_the_padded_scores(attn_implementation):
    """Left-padded prompts and right-padded responses of mixed lengths (one row filling both): each row's score is
    read at its last response token, whether the micro batch runs padded or packed into one row."""
    model = _tiny_reward_model(attn_implementation)
    inputs = _prompt_and_response([6, 1, 3, 5, 2, 4, 6], [5, 2, 1, 4, 3, 5, 1], prompt=6, response=5)
    padded = score_sequences(model, inputs, micro_batch_size=3)
    packed = score_sequences(model, inputs, micro_batch_size=3, use_remove_padding=True)
    torch.testing.assert_close(packed, padded, rtol=0, atol=1e-5)
    # with a micro batch per row the scores are each sequence's alone: packing kept the rows apart
    alone = torch.cat([score_sequences(model, inputs[i : i + 1], 1, use_remove_padding=True) for i in range(7)])
    torch.testing.assert_close(packed, alone, rtol=0, atol=1e-5)
    dynamic = score_sequences(model, inputs, 1, max_token_len=16, use_remove_padding=True)
    torch.testing.assert_close(dynamic, padded, rtol=0, atol=1e-5)
    assert padded.std() > 1e-3  # distinct scores: a row read at the wrong token would show
