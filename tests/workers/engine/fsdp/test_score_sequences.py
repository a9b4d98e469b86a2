"""score_sequences: token-budget micro batches (reward_model.use_dynamic_bsz) give the fixed-size batches' scores."""

import torch
from tensordict import TensorDict
from transformers import Qwen2Config, Qwen2ForTokenClassification

from verl.utils.model import compute_position_id_with_mask
from verl.workers.engine.fsdp.hf_forward import score_sequences


def test_dynamic_micro_batches_keep_scores_and_row_order():
    torch.manual_seed(0)
    cfg = Qwen2Config(vocab_size=64, hidden_size=32, num_hidden_layers=1, num_attention_heads=2,
                      num_key_value_heads=1, intermediate_size=64, num_labels=1)  # fmt: skip
    model = Qwen2ForTokenClassification(cfg).eval()
    lengths = [9, 2, 5, 7, 3, 8]
    mask = torch.zeros(len(lengths), 10, dtype=torch.long)
    for row, n in enumerate(lengths):
        mask[row, 10 - n :] = 1
    ids = torch.randint(1, 64, mask.shape) * mask
    inputs = TensorDict(
        {"input_ids": ids, "attention_mask": mask, "position_ids": compute_position_id_with_mask(mask)},
        batch_size=[len(lengths)],
    )
    with torch.no_grad():
        fixed = score_sequences(model, inputs, micro_batch_size=1)
        dynamic = score_sequences(model, inputs, micro_batch_size=1, max_token_len=12)
    torch.testing.assert_close(dynamic, fixed, rtol=1e-5, atol=1e-5)
