"""The CPU attention's plain form equals transformers' sdpa attention, takes only the calls it is meant for, and
the switch to it is scoped."""

import copy

import pytest
import torch
from transformers import AttentionInterface, AutoModelForCausalLM
from transformers.integrations.sdpa_attention import sdpa_attention_forward

import verl.workers.engine.fsdp.cpu_attention as cpu_attention_module
from verl.demo.tiny_model import make_tiny_model_dir
from verl.workers.engine.fsdp.cpu_attention import IMPLEMENTATION, cpu_attention, cpu_attention_forward, math_attention


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
    got, weights = cpu_attention_forward(module, q, k, v, m, scaling=0.3)
    want, _ = sdpa_attention_forward(module, q, k, v, m, scaling=0.3)
    assert weights is None and got.shape == want.shape == (3, 1, heads, 16)
    torch.testing.assert_close(got, want, rtol=1e-5, atol=1e-6)


def test_decode_step_in_bf16_is_within_bf16_rounding_of_fp32_sdpa():
    q, k, v, m = _inputs(1, 4, 2, 33, torch.bfloat16, "bool")
    module = _Attention(2)
    got, _ = cpu_attention_forward(module, q, k, v, m)
    want, _ = sdpa_attention_forward(module, q.float(), k.float(), v.float(), m)
    assert got.dtype == torch.bfloat16
    torch.testing.assert_close(got.float(), want, rtol=2e-2, atol=2e-2)


@pytest.mark.parametrize("heads,kv_heads", [(4, 4), (6, 2)], ids=["mha", "gqa3"])
@pytest.mark.parametrize("mask", ["none", "bool", "float"])
def test_plain_form_over_many_rows_equals_sdpa_forward_and_backward(heads, kv_heads, mask):
    """Prefill/training shape in float64: causal and left padding; a padding query row attends nowhere. Values
    and gradients match sdpa on every row that attends somewhere, and no gradient is NaN."""
    q, k, v, m = _inputs(7, heads, kv_heads, 7, torch.float64, mask)
    if mask == "none":
        m = torch.ones(7, 7, dtype=torch.bool).tril()[None, None]
    visible = m if m.dtype == torch.bool else m > torch.finfo(m.dtype).min
    rows = visible.reshape(-1, 7, 7).any(-1).expand(3, 7)  # (b, q): query rows that see at least one key
    grads = []
    for fn in ("plain", "sdpa"):
        qq, kk, vv = (t.clone().requires_grad_(True) for t in (q, k, v))
        if fn == "plain":
            out = math_attention(qq, kk, vv, m, scaling=0.3)
        else:
            out, _ = sdpa_attention_forward(_Attention(heads // kv_heads), qq, kk, vv, m, scaling=0.3)
        out = out * rows[:, :, None, None]  # what a loss over real tokens reads
        (out * torch.linspace(-1, 1, out.numel(), dtype=out.dtype).view_as(out)).sum().backward()
        grads.append((out.detach(), qq.grad, kk.grad, vv.grad))
    for got, want in zip(*grads):
        assert torch.isfinite(got).all()
        torch.testing.assert_close(got, torch.nan_to_num(want), rtol=1e-9, atol=1e-10)


@pytest.fixture
def calls(monkeypatch):
    """Which form each call took: 'plain' or 'sdpa'."""
    taken = []
    plain, sdpa = cpu_attention_module.math_attention, cpu_attention_module._sdpa
    monkeypatch.setattr(cpu_attention_module, "math_attention", lambda *a, **k: taken.append("plain") or plain(*a, **k))
    monkeypatch.setattr(cpu_attention_module, "_sdpa", lambda *a, **k: taken.append("sdpa") or sdpa(*a, **k))
    return taken


@pytest.mark.parametrize(
    "dtype,grad,budget,expected",
    [
        (torch.bfloat16, True, None, "plain"),  # a bf16 training pass
        (torch.float16, True, None, "plain"),
        (torch.float32, True, None, "sdpa"),  # sdpa's fp32 kernel is the faster one
        (torch.bfloat16, False, None, "sdpa"),  # no backward to speed up
        (torch.bfloat16, True, 3 * 4 * 7 * 7 - 1, "sdpa"),  # a score matrix over the budget: sdpa keeps no copy
    ],
)
def test_which_training_calls_take_the_plain_form(calls, monkeypatch, dtype, grad, budget, expected):
    if budget is not None:
        monkeypatch.setattr(cpu_attention_module, "MATH_FORM_MAX_SCORES", budget)
    q, k, v, m = _inputs(7, 4, 2, 7, dtype, "bool")
    with torch.set_grad_enabled(grad):
        cpu_attention_forward(_Attention(2), q, k, v, m)
    assert calls == [expected]


def test_bf16_training_pass_through_the_plain_form_matches_sdpa_within_bf16_rounding(calls):
    q, k, v, m = _inputs(7, 4, 2, 7, torch.bfloat16, "bool")
    got, _ = cpu_attention_forward(_Attention(2), q, k, v, m)
    want, _ = sdpa_attention_forward(_Attention(2), q.double(), k.double(), v.double(), m)
    assert calls == ["plain"] and got.dtype == torch.bfloat16
    rows = m.any(-1).reshape(3, 7)  # query rows that see at least one key
    torch.testing.assert_close(got.double()[rows], want[rows], rtol=2e-2, atol=2e-2)


@pytest.mark.parametrize("is_causal", [None, True, False])
def test_a_training_call_without_a_mask_is_causal_as_sdpa_reads_it(calls, is_causal):
    """transformers leaves the mask out of a batch without padding and lets sdpa's is_causal apply causality."""
    q, k, v, _ = _inputs(7, 4, 2, 7, torch.bfloat16, "none")
    module = _Attention(2)
    got, _ = cpu_attention_forward(module, q, k, v, None, is_causal=is_causal)
    want, _ = sdpa_attention_forward(module, q.double(), k.double(), v.double(), None, is_causal=is_causal)
    assert calls == ["plain"]
    torch.testing.assert_close(got.double(), want, rtol=2e-2, atol=2e-2)


def test_a_causal_call_without_a_mask_over_more_keys_than_queries_is_left_to_sdpa(calls):
    q, k, v, _ = _inputs(4, 4, 2, 7, torch.bfloat16, "none")
    cpu_attention_forward(_Attention(2), q, k, v, None)
    assert calls == ["sdpa"]


def test_a_bf16_forward_without_padding_matches_sdpa(tiny_lm, calls):
    """No padding: the model passes no mask at all, and the plain form must still be causal."""
    model = copy.deepcopy(tiny_lm).to(torch.bfloat16)
    ids = torch.tensor([[5, 17, 3, 99, 42, 7, 8, 11]])
    with torch.no_grad():
        want = model(input_ids=ids, attention_mask=torch.ones_like(ids)).logits.float()
    with cpu_attention(model), torch.enable_grad():
        got = model(input_ids=ids, attention_mask=torch.ones_like(ids)).logits.float()
    assert calls == ["plain"] * model.config.num_hidden_layers
    torch.testing.assert_close(got, want, rtol=0.05, atol=0.05)


@pytest.mark.parametrize("case", ["dropout", "position_bias"])
def test_dropout_and_position_biases_are_sdpa_itself(case):
    q, k, v, m = _inputs(1, 4, 2, 9, torch.float32, "bool")
    module = _Attention(2)
    kwargs = {"position_bias": torch.randn(1, 4, 1, 9)} if case == "position_bias" else {}
    dropout = 0.5 if case == "dropout" else 0.0
    torch.manual_seed(1)
    got, _ = cpu_attention_forward(module, q, k, v, m, dropout=dropout, **kwargs)
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
    with cpu_attention(tiny_lm):
        assert tiny_lm.config._attn_implementation == IMPLEMENTATION

        def counted(module, query, *args, **kw):
            query_lengths.append(query.shape[2])
            return cpu_attention_forward(module, query, *args, **kw)

        AttentionInterface.register(IMPLEMENTATION, counted)
        try:
            got = tiny_lm.generate(prompts, **kwargs)
        finally:
            AttentionInterface.register(IMPLEMENTATION, cpu_attention_forward)
    assert tiny_lm.config._attn_implementation == "sdpa"
    assert torch.equal(got, want)
    layers = tiny_lm.config.num_hidden_layers
    assert query_lengths.count(1) == 11 * layers  # every step after the prefill decodes one row per layer


def test_only_the_decoder_of_a_vision_language_model_switches(tmp_path):
    from transformers import AutoConfig

    from verl.demo.tiny_vlm import make_tiny_vlm_dir

    config = AutoConfig.from_pretrained(make_tiny_vlm_dir(str(tmp_path / "vlm")))
    config._attn_implementation = {"": "sdpa", "text_config": "sdpa", "vision_config": "eager"}
    model = torch.nn.Module()
    model.config = config
    with cpu_attention(model):
        assert config._attn_implementation == IMPLEMENTATION
        assert config.text_config._attn_implementation == IMPLEMENTATION
        assert config.vision_config._attn_implementation == "eager"
    assert config._attn_implementation == "sdpa"
    assert config.text_config._attn_implementation == "sdpa"
    assert config.vision_config._attn_implementation == "eager"


def test_an_eager_model_is_left_alone(tiny_lm):
    tiny_lm.config._attn_implementation = "eager"
    try:
        with cpu_attention(tiny_lm):
            assert tiny_lm.config._attn_implementation == "eager"
    finally:
        tiny_lm.config._attn_implementation = "sdpa"
