"""SFTDataset: column/dict-key extraction, the shifted loss mask, padding and the three truncation modes."""

import pandas as pd
import pytest
import torch
from transformers import AutoTokenizer

from verl.demo.tiny_model import shipped_tokenizer_path
from verl.utils.dataset import SFTDataset


@pytest.fixture(scope="module")
def tokenizer():
    return AutoTokenizer.from_pretrained(shipped_tokenizer_path())


@pytest.fixture()
def flat_file(tmp_path):
    path = tmp_path / "flat.parquet"
    pd.DataFrame({"question": ["2+3=", "7+1="], "answer": ["5", "8"]}).to_parquet(path)
    return str(path)


def _lengths(tokenizer, prompt, response):
    prompt_text = tokenizer.apply_chat_template(
        [{"role": "user", "content": prompt}], add_generation_prompt=True, tokenize=False
    )
    p = tokenizer(prompt_text, add_special_tokens=False)["input_ids"]
    r = tokenizer(response + tokenizer.eos_token, add_special_tokens=False)["input_ids"]
    return p, r


def test_item_layout_and_loss_mask(tokenizer, flat_file):
    ds = SFTDataset(flat_file, tokenizer, {"prompt_key": "question", "response_key": "answer", "max_length": 64})
    assert len(ds) == 2
    item = ds[0]
    assert set(item) == {"input_ids", "attention_mask", "position_ids", "loss_mask"}
    assert all(v.shape == (64,) and v.dtype == torch.long for v in item.values())
    p, r = _lengths(tokenizer, "2+3=", "5")
    n = len(p) + len(r)
    assert item["input_ids"][:n].tolist() == p + r
    assert item["input_ids"][n:].eq(tokenizer.pad_token_id).all()
    assert item["attention_mask"].tolist() == [1] * n + [0] * (64 - n)
    assert item["position_ids"][:n].tolist() == list(range(n)) and item["position_ids"][n:].eq(n - 1).all()
    # trained predictions: from the last prompt token up to the token before EOS
    expected = [0] * (len(p) - 1) + [1] * len(r) + [0] * (64 - n + 1)
    assert item["loss_mask"].tolist() == expected
    # with the trainer's shift (loss_mask[:, :-1] weights the prediction of input_ids[1:]) exactly the response
    # tokens, EOS included, are learned
    targets = item["input_ids"][1:][item["loss_mask"][:-1].bool()]
    assert targets.tolist() == r


def test_dict_keys_navigate_chat_and_struct_columns(tokenizer, tmp_path):
    path = tmp_path / "nested.parquet"
    pd.DataFrame(
        {
            "prompt": [[{"role": "user", "content": "how much is 4+4?"}]],
            "extra_info": [{"question": "ignored", "answer": "8"}],
        }
    ).to_parquet(path)
    cfg = {
        "prompt_key": "prompt",
        "prompt_dict_keys": ["content"],
        "response_key": "extra_info",
        "response_dict_keys": ["answer"],
        "max_length": 64,
    }
    ds = SFTDataset([str(path)], tokenizer, cfg)
    assert ds.prompts == ["how much is 4+4?"] and ds.responses == ["8"]
    with pytest.raises(KeyError, match="missing"):
        SFTDataset(str(path), tokenizer, {**cfg, "response_dict_keys": ["missing"]})
    with pytest.raises(KeyError, match="data.prompt_key='nope'"):
        SFTDataset(str(path), tokenizer, {**cfg, "prompt_key": "nope"})


def test_truncation_modes(tokenizer, flat_file):
    base = {"prompt_key": "question", "response_key": "answer"}
    full = SFTDataset(flat_file, tokenizer, {**base, "max_length": 64})[0]
    n = int(full["attention_mask"].sum())
    left = SFTDataset(flat_file, tokenizer, {**base, "max_length": 8, "truncation": "left"})[0]
    assert left["input_ids"].tolist() == full["input_ids"][n - 8 : n].tolist()
    assert left["loss_mask"].tolist() == full["loss_mask"][n - 8 : n].tolist()
    assert left["attention_mask"].eq(1).all()
    right = SFTDataset(flat_file, tokenizer, {**base, "max_length": 8, "truncation": "right"})[0]
    assert right["input_ids"].tolist() == full["input_ids"][:8].tolist()
    with pytest.raises(NotImplementedError, match="max_length=8"):
        SFTDataset(flat_file, tokenizer, {**base, "max_length": 8})[0]
    with pytest.raises(ValueError, match="truncation"):
        SFTDataset(flat_file, tokenizer, {**base, "truncation": "middle"})


def test_tokenizer_path_and_missing_file(flat_file, tmp_path):
    ds = SFTDataset(
        flat_file, shipped_tokenizer_path(), {"prompt_key": "question", "response_key": "answer", "max_length": 64}
    )
    assert ds[1]["attention_mask"].sum() > 0
    with pytest.raises(FileNotFoundError, match="missing.parquet"):
        SFTDataset(str(tmp_path / "missing.parquet"), shipped_tokenizer_path(), {})
