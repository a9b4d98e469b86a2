"""Tests for verl.utils.tokenizer and the byte-level ChatML tokenizer the project ships."""

import filecmp
import os

import pytest
from transformers import AutoTokenizer

from verl.demo.tiny_model import shipped_tokenizer_path
from verl.utils.tokenizer import build_byte_tokenizer, hf_processor, hf_tokenizer, set_pad_token_id


@pytest.fixture(scope="module")
def tok():
    return hf_tokenizer(shipped_tokenizer_path())


def test_shipped_assets_equal_a_fresh_build(tmp_path):
    build_byte_tokenizer(str(tmp_path))
    shipped = shipped_tokenizer_path()
    for name in ("tokenizer.json", "tokenizer_config.json"):
        assert filecmp.cmp(os.path.join(shipped, name), os.path.join(tmp_path, name), shallow=False), name
    # the ship is small: a few KB in all
    assert sum(os.path.getsize(os.path.join(shipped, f)) for f in os.listdir(shipped)) < 32 * 1024


def test_vocab_and_special_ids(tok):
    assert len(tok) == 259
    assert tok.eos_token == tok.pad_token == "<|endoftext|>"
    assert (tok.eos_token_id, tok.pad_token_id) == (256, 256)
    assert tok.convert_tokens_to_ids(["<|im_start|>", "<|im_end|>"]) == [257, 258]
    # ids 0..255 are the raw bytes
    assert tok.encode("Az\n", add_special_tokens=False) == [65, 122, 10]


@pytest.mark.parametrize("text", ["What is 12 + 30?", "  spaces\tand\nnewlines ", "héllo wörld ∑ 🙂", "#### -1,234.5"])
def test_round_trip(tok, text):
    ids = tok.encode(text, add_special_tokens=False)
    assert len(ids) == len(text.encode("utf-8"))
    assert tok.decode(ids) == text


def test_chat_template_chatml(tok):
    messages = [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "1+1?"}]
    text = tok.apply_chat_template(messages, add_generation_prompt=True, tokenize=False)
    assert text == "<|im_start|>system\nBe brief.<|im_end|>\n<|im_start|>user\n1+1?<|im_end|>\n<|im_start|>assistant\n"
    no_gen = tok.apply_chat_template(messages, add_generation_prompt=False, tokenize=False)
    assert text == no_gen + "<|im_start|>assistant\n"
    ids = tok(text, add_special_tokens=False)["input_ids"]
    assert ids[0] == 257 and ids.count(258) == 2
    assert tok.decode(ids, skip_special_tokens=True) == "system\nBe brief.\nuser\n1+1?\nassistant\n"


def test_chat_template_tools(tok):
    tools = [{"type": "function", "function": {"name": "calc", "parameters": {}}}]
    messages = [
        {"role": "user", "content": "hi"},
        {
            "role": "assistant",
            "content": "",
            "tool_calls": [{"type": "function", "function": {"name": "calc", "arguments": {"x": 1}}}],
        },
        {"role": "tool", "content": "3"},
    ]
    text = tok.apply_chat_template(messages, tools=tools, tokenize=False)
    assert text.startswith("<|im_start|>system\n# Tools")
    assert '<tools>\n{"type": "function", "function": {"name": "calc", "parameters": {}}}\n</tools>' in text
    assert (
        '<|im_start|>assistant\n<tool_call>\n{"name": "calc", "arguments": {"x": 1}}\n</tool_call><|im_end|>\n' in text
    )
    assert text.endswith("<|im_start|>user\n<tool_response>\n3\n</tool_response><|im_end|>\n")


def test_set_pad_token_id_fills_from_eos(tok):
    class Tok:
        pad_token_id = None
        pad_token = None
        eos_token_id = 7
        eos_token = "</s>"

    t = Tok()
    with pytest.warns(UserWarning) as record:
        set_pad_token_id(t)
    messages = [str(w.message) for w in record]
    assert any("pad_token_id is None" in m for m in messages) and any("pad_token is None" in m for m in messages)
    assert (t.pad_token_id, t.pad_token) == (7, "</s>")


def test_hf_processor_is_none_for_text_only_model():
    assert hf_processor(shipped_tokenizer_path()) is None
    assert hf_processor("/nonexistent/dir") is None


def test_auto_tokenizer_loads_shipped_dir():
    tok = AutoTokenizer.from_pretrained(shipped_tokenizer_path())
    assert tok.chat_template is not None and len(tok) == 259
