"""The CPU decode attention equals transformers' sdpa attention, and the HF rollout's switch to it is scoped."""

import pytest
import torch
from transformers import AttentionInterface, AutoModelForCausalLM
from transformers.integrations.sdpa_attention import sdpa_attention_forward

from verl.utils.cpu_decode_attention import IMPLEMENTATION, cpu_decode_attention, decode_attention_forward
from verl.utils.tiny_model import make_tiny_model_dir


class _Attention(torch.nn.Module):
    """What transformers' attention functions read from the calling module."""

    def __init__(self, groups: int):
        super().__init__()
        self.num_key_value_groups = groups
        self.is_causal = True
        self.layer_idx = 0


def _inputs(q_len: int, heads: int, kv_heads: int, kv_len: int, dtype, mask: str):
    gen = torch.Generator().manual_seed(0)
    q = torch.randn(3, heads, q_len, 16, generator=gen).to(dtype)
    k = torch.randn(3, kv_heads, kv_len, 16, generator=gen).to(dtype)
    v = torch.randn(3, kv_heads, kv_len, 16, generator=gen).to(dtype)
    visible = torch.ones(3, 1, q_len, kv_len, dtype=torch.bool).tril(diagonal=kv_len - q_len)
    visible[1, ..., :4] = False  # a left-padded row
    visible[2, ..., :2] = False
    if mask == "none":
        return q, k, v, None
    if mask == "bool":
        return q, k, v, visible
    return q, k, v, torch.zeros(visible.shape, dtype=dtype).masked_fill(~visible, torch.finfo(dtype).min)


@pytest.mark.parametrize("heads,kv_heads", [(4, 4), (4, 2), (6, 1)], ids=["mha", "gqa2", "mqa"])
@pytest.mark.parametrize("mask", ["none", "bool", "float"])
def test_decode_step_equals_sdpa(heads, kv_heads, mask):
    q, k, v, m = _inputs(1, heads, kv_heads, 9, torch.float32, mask)
    module = _Attention(heads // kv_heads)
    got, weights = decode_attention_forward(module, q, k, v, m, scaling=0.3)
    want, _ = sdpa_attention_forward(module, q, k, v, m, scaling=0.3)
    assert weights is None and got.shape == want.shape == (3, 1, heads, 16)
    torch.testing.assert_close(got, want, rtol=1e-5, atol=1e-6)


def test_decode_step_in_bf16_is_within_bf16_rounding_of_fp32_sdpa():
    q, k, v, m = _inputs(1, 4, 2, 33, torch.bfloat16, "bool")
    module = _Attention(2)
    got, _ = decode_attention_forward(module, q, k, v, m)
    want, _ = sdpa_attention_forward(module, q.float(), k.float(), v.float(), m)
    assert got.dtype == torch.bfloat16
    torch.testing.assert_close(got.float(), want, rtol=2e-2, atol=2e-2)


@pytest.mark.parametrize("case", ["prefill", "dropout", "position_bias"])
def test_everything_but_a_plain_decode_step_is_sdpa_itself(case):
    q, k, v, m = _inputs(5 if case == "prefill" else 1, 4, 2, 9, torch.float32, "bool")
    module = _Attention(2)
    kwargs = {"position_bias": torch.randn(1, 4, 1, 9)} if case == "position_bias" else {}
    dropout = 0.5 if case == "dropout" else 0.0
    torch.manual_seed(1)
    got, _ = decode_attention_forward(module, q, k, v, m, dropout=dropout, **kwargs)
    torch.manual_seed(1)
    want, _ = sdpa_attention_forward(module, q, k, v, m, dropout=dropout, **kwargs)
    assert torch.equal(got, want)


@pytest.fixture(scope="module")
def tiny_lm(tmp_path_factory):
    path = make_tiny_model_dir(str(tmp_path_factory.mktemp("lm")), num_heads=4, num_kv_heads=2)
    return AutoModelForCausalLM.from_pretrained(path, attn_implementation="sdpa").eval()


def test_greedy_generation_is_unchanged_and_decodes_through_the_cpu_form(tiny_lm):
    prompts = torch.tensor([[0, 0, 11, 12, 13], [21, 22, 23, 24, 25]])
    mask = (prompts != 0).long()
    kwargs = dict(attention_mask=mask, max_new_tokens=12, do_sample=False, pad_token_id=0, eos_token_id=None)
    want = tiny_lm.generate(prompts, **kwargs)
    query_lengths = []
    with cpu_decode_attention(tiny_lm):
        assert tiny_lm.config._attn_implementation == IMPLEMENTATION

        def counted(module, query, *args, **kw):
            query_lengths.append(query.shape[2])
            return decode_attention_forward(module, query, *args, **kw)

        AttentionInterface.register(IMPLEMENTATION, counted)
        try:
            got = tiny_lm.generate(prompts, **kwargs)
        finally:
            AttentionInterface.register(IMPLEMENTATION, decode_attention_forward)
    assert tiny_lm.config._attn_implementation == "sdpa"
    assert torch.equal(got, want)
    layers = tiny_lm.config.num_hidden_layers
    assert query_lengths.count(1) == 11 * layers  # every step after the prefill decodes one row per layer


def test_only_the_decoder_of_a_vision_language_model_switches(tmp_path):
    from transformers import AutoConfig

    from verl.utils.tiny_vlm import make_tiny_vlm_dir

    config = AutoConfig.from_pretrained(make_tiny_vlm_dir(str(tmp_path / "vlm")))
    config._attn_implementation = {"": "sdpa", "text_config": "sdpa", "vision_config": "eager"}
    model = torch.nn.Module()
    model.config = config
    with cpu_decode_attention(model):
        assert config._attn_implementation == IMPLEMENTATION
        assert config.text_config._attn_implementation == IMPLEMENTATION
        assert config.vision_config._attn_implementation == "eager"
    assert config._attn_implementation == "sdpa"
    assert config.text_config._attn_implementation == "sdpa"
    assert config.vision_config._attn_implementation == "eager"


def test_an_eager_model_is_left_alone(tiny_lm):
    tiny_lm.config._attn_implementation = "eager"
    try:
        with cpu_decode_attention(tiny_lm):
            assert tiny_lm.config._attn_implementation == "eager"
    finally:
        tiny_lm.config._attn_implementation = "sdpa"
