"""Tests for verl.demo.tiny_model: seeded tiny HF models that load offline with the shipped tokenizer."""

import pytest
import torch
from transformers import (
    AutoModelForCausalLM,
    AutoModelForSequenceClassification,
    AutoModelForTokenClassification,
    AutoTokenizer,
)

from verl.demo.tiny_model import make_tiny_model_dir


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


# the real config.json / tokenizer facts each family's stand-in keeps
FAMILY_FACTS = {
    "qwen2.5": {"model_type": "qwen2", "tied": True, "bos": None, "pad": "<|endoftext|>", "padded_vocab": True},
    "qwen3": {"model_type": "qwen3", "tied": True, "bos": None, "pad": "<|endoftext|>", "padded_vocab": True},
    "llama3.1": {"model_type": "llama", "tied": False, "bos": "<|begin_of_text|>", "pad": None, "padded_vocab": False},
    "gemma2": {"model_type": "gemma2", "tied": True, "bos": "<bos>", "pad": "<pad>", "padded_vocab": False},
    "deepseek-llm": {"model_type": "llama", "tied": False, "bos": "<｜begin▁of▁sentence｜>", "pad": None,
                     "padded_vocab": True},
    "qwen3-moe": {"model_type": "qwen3_moe", "tied": False, "bos": None, "pad": "<|endoftext|>", "padded_vocab": True},
}  # fmt: skip


@pytest.mark.parametrize("family", sorted(FAMILY_FACTS))
def test_family_stand_ins_keep_their_quirks(tmp_path, family):
    from transformers import GenerationConfig

    facts = FAMILY_FACTS[family]
    path = make_tiny_model_dir(str(tmp_path / family), family=family, hidden_size=128, num_heads=4, num_kv_heads=2)
    model, tok = AutoModelForCausalLM.from_pretrained(path), AutoTokenizer.from_pretrained(path)
    config = model.config
    assert config.model_type == facts["model_type"]
    assert config.tie_word_embeddings is facts["tied"]
    assert (tok.bos_token, tok.pad_token) == (facts["bos"], facts["pad"])
    assert (config.vocab_size > len(tok)) is facts["padded_vocab"]
    # a BOS the template writes is also what plain encoding prepends, as in the real tokenizers
    chat = tok.apply_chat_template([{"role": "user", "content": "hi"}], add_generation_prompt=True, tokenize=False)
    ids = tok(chat, add_special_tokens=False)["input_ids"]
    assert (ids[0] == tok.bos_token_id) is (facts["bos"] is not None)
    assert (tok("hi")["input_ids"][0] == tok.bos_token_id) is (facts["bos"] is not None)
    eos = GenerationConfig.from_pretrained(path).eos_token_id
    assert tok.eos_token_id == (eos[0] if isinstance(eos, list) else eos)
    ids = torch.tensor([ids])
    assert model(ids).logits.shape == (1, ids.shape[1], config.vocab_size)
    if family == "llama3.1":
        assert config.rope_parameters["rope_type"] == "llama3" and isinstance(config.eos_token_id, list)
    if family in ("qwen3", "gemma2", "qwen3-moe"):  # an explicit head_dim, as in the real configs
        assert config.head_dim * config.num_attention_heads != config.hidden_size
    if family == "gemma2":
        assert config.final_logit_softcapping and config.attn_logit_softcapping
        assert config.layer_types == ["sliding_attention", "full_attention"] and config.sliding_window == 8
    if family == "deepseek-llm":
        assert config.num_key_value_heads == config.num_attention_heads
    if family == "qwen3-moe":
        assert config.num_experts == 4 and config.num_experts_per_tok == 2


def test_family_is_checked_and_model_type_callers_unchanged(tmp_path):
    with pytest.raises(ValueError, match="family='mistral'"):
        make_tiny_model_dir(str(tmp_path / "bad"), family="mistral")
