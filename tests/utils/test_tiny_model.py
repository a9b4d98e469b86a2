"""Tests for verl.utils.tiny_model: seeded tiny HF models that load offline with the shipped tokenizer."""

import pytest
import torch
from transformers import (
    AutoModelForCausalLM,
    AutoModelForSequenceClassification,
    AutoModelForTokenClassification,
    AutoTokenizer,
)

from verl.utils.tiny_model import make_tiny_model_dir


def _state(model):
    return {k: v.clone() for k, v in model.state_dict().items()}


def test_causal_lm_loads_and_generates(tmp_path):
    path = make_tiny_model_dir(str(tmp_path / "m"))
    model = AutoModelForCausalLM.from_pretrained(path)
    tok = AutoTokenizer.from_pretrained(path)
    assert model.config.model_type == "qwen2"
    assert model.config.vocab_size == len(tok) == 259
    assert model.config.pad_token_id == model.config.eos_token_id == tok.eos_token_id
    assert (model.config.hidden_size, model.config.num_hidden_layers) == (64, 2)
    enc = tok.apply_chat_template(
        [{"role": "user", "content": "2+2="}], add_generation_prompt=True, return_tensors="pt", return_dict=True
    )
    out = model.generate(**enc, max_new_tokens=4, min_new_tokens=4, do_sample=False)
    assert out.shape == (1, enc["input_ids"].shape[1] + 4)
    assert torch.equal(out[:, : enc["input_ids"].shape[1]], enc["input_ids"])


def test_same_seed_same_weights_other_seed_differs(tmp_path):
    a = _state(AutoModelForCausalLM.from_pretrained(make_tiny_model_dir(str(tmp_path / "a"), seed=3)))
    torch.manual_seed(12345)  # the caller's RNG must not matter
    b = _state(AutoModelForCausalLM.from_pretrained(make_tiny_model_dir(str(tmp_path / "b"), seed=3)))
    c = _state(AutoModelForCausalLM.from_pretrained(make_tiny_model_dir(str(tmp_path / "c"), seed=4)))
    assert a.keys() == b.keys()
    assert all(torch.equal(a[k], b[k]) for k in a)
    assert any(not torch.equal(a[k], c[k]) for k in a)


def test_caller_rng_untouched(tmp_path):
    torch.manual_seed(0)
    expected = torch.rand(3)
    torch.manual_seed(0)
    make_tiny_model_dir(str(tmp_path / "m"))
    assert torch.equal(torch.rand(3), expected)


@pytest.mark.parametrize(
    "head, auto_cls",
    [
        ("token_classification", AutoModelForTokenClassification),
        ("sequence_classification", AutoModelForSequenceClassification),
    ],
)
def test_value_heads_and_llama(tmp_path, head, auto_cls):
    path = make_tiny_model_dir(str(tmp_path / head), model_type="llama", head=head, tie_word_embeddings=True)
    model = auto_cls.from_pretrained(path)
    assert model.config.model_type == "llama" and model.config.num_labels == 1
    logits = model(input_ids=torch.tensor([[1, 2, 3]])).logits
    assert logits.shape[-1] == 1


def test_dtype_and_tied_embeddings(tmp_path):
    path = make_tiny_model_dir(str(tmp_path / "bf16"), tie_word_embeddings=True, dtype=torch.bfloat16)
    model = AutoModelForCausalLM.from_pretrained(path, dtype="auto")
    assert model.dtype == torch.bfloat16
    assert model.lm_head.weight.data_ptr() == model.model.embed_tokens.weight.data_ptr()


def test_bad_arguments_name_the_value(tmp_path):
    with pytest.raises(ValueError, match="model_type='gpt9'"):
        make_tiny_model_dir(str(tmp_path / "x"), model_type="gpt9")
    with pytest.raises(ValueError, match="head='value'"):
        make_tiny_model_dir(str(tmp_path / "y"), head="value")
    with pytest.raises(ValueError, match="num_kv_heads=3"):
        make_tiny_model_dir(str(tmp_path / "z"), num_kv_heads=3)
