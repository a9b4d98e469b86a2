"""MultiTurnSFTDataset: assistant turns (and only those) carry loss, padding/positions, truncation, role checks."""

import pandas as pd
import pytest
import torch
from transformers import AutoTokenizer

from verl.demo.tiny_model import shipped_tokenizer_path
from verl.utils.dataset import MultiTurnSFTDataset

CONVERSATIONS = [
    [
        {"role": "system", "content": "You are terse."},
        {"role": "user", "content": "What is 2+2?"},
        {"role": "assistant", "content": "Four."},
        {"role": "user", "content": "And 3+3?"},
        {"role": "assistant", "content": "Six."},
    ],
    [
        {"role": "user", "content": "Weather?"},
        {"role": "assistant", "content": "Let me check."},
        {"role": "tool", "content": "sunny"},
        {"role": "tool", "content": "22C"},
        {"role": "assistant", "content": "Sunny and warm."},
    ],
]


@pytest.fixture(scope="module")
def tokenizer():
    return AutoTokenizer.from_pretrained(shipped_tokenizer_path())


@pytest.fixture()
def data_file(tmp_path):
    path = tmp_path / "mt.parquet"
    pd.DataFrame({"messages": CONVERSATIONS}).to_parquet(path)
    return str(path)


def test_loss_mask_covers_exactly_the_assistant_turns(tokenizer, data_file):
    ds = MultiTurnSFTDataset(data_file, tokenizer, {"max_length": 256})
    assert len(ds) == 2
    for item, conversation in zip([ds[0], ds[1]], CONVERSATIONS):
        assert all(v.shape == (256,) and v.dtype == torch.long for v in item.values())
        valid = item["attention_mask"].bool()
        trained = tokenizer.decode(item["input_ids"][item["loss_mask"].bool()])
        untrained = tokenizer.decode(item["input_ids"][valid & ~item["loss_mask"].bool()])
        for message in conversation:
            if message["role"] == "assistant":
                assert message["content"] in trained and message["content"] not in untrained
            else:
                assert message["content"] in untrained and message["content"] not in trained
        # the whole conversation, rendered at once, is what the tokens spell
        whole = tokenizer.apply_chat_template(conversation, tokenize=False)
        assert tokenizer.decode(item["input_ids"][valid]) == whole
        n = int(valid.sum())
        assert item["attention_mask"].tolist() == [1] * n + [0] * (256 - n)
        assert item["position_ids"].tolist() == list(range(n)) + [0] * (256 - n)
        assert item["input_ids"][n:].eq(tokenizer.pad_token_id).all() and item["loss_mask"][n:].eq(0).all()
    # each assistant turn is trained with its closing tokens but not the generation prompt that opens it
    assert tokenizer.decode(ds[0]["input_ids"][ds[0]["loss_mask"].bool()]) == "Four.<|im_end|>\nSix.<|im_end|>\n"


def test_truncation(tokenizer, data_file):
    full = MultiTurnSFTDataset(data_file, tokenizer, {"max_length": 256})[0]
    n = int(full["attention_mask"].sum())
    left = MultiTurnSFTDataset(data_file, tokenizer, {"max_length": 10, "truncation": "left"})[0]
    assert left["input_ids"].tolist() == full["input_ids"][n - 10 : n].tolist()
    assert left["loss_mask"].tolist() == full["loss_mask"][n - 10 : n].tolist()
    right = MultiTurnSFTDataset(data_file, tokenizer, {"max_length": 10, "truncation": "right"})[0]
    assert right["input_ids"].tolist() == full["input_ids"][:10].tolist()
    with pytest.raises(ValueError, match="max_length=10"):
        MultiTurnSFTDataset(data_file, tokenizer, {"max_length": 10})[0]


def test_custom_messages_key_and_bad_roles(tokenizer, tmp_path):
    path = tmp_path / "custom.parquet"
    bad = [
        [{"role": "user", "content": "hi"}, {"role": "system", "content": "late"}],
        [{"role": "narrator", "content": "once upon a time"}],
    ]
    pd.DataFrame({"chat": bad}).to_parquet(path)
    ds = MultiTurnSFTDataset(str(path), tokenizer, {"multiturn": {"messages_key": "chat"}, "max_length": 64})
    with pytest.raises(ValueError, match="system message is only allowed first"):
        ds[0]
    with pytest.raises(ValueError, match="narrator"):
        ds[1]
    with pytest.raises(KeyError, match="messages_key='messages'"):
        MultiTurnSFTDataset(str(path), tokenizer)
