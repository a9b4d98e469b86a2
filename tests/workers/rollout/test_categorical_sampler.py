"""Inverse-CDF sampling of the next token (``verl/workers/rollout/categorical_sampler.py``): it draws from the
softmax of the scores, never an excluded entry, gives the sampled tokens' log-probs, and is what HFRollout samples
with on CPU (HF's ``torch.multinomial`` is not called there)."""

import math

import pytest
import torch
from transformers import TopKLogitsWarper

from tests.workers.rollout.test_hf_rollout import model, prompts, rollout_config  # noqa: F401 - the tiny model fixture
from verl.workers.rollout import HFRollout
from verl.workers.rollout.categorical_sampler import CategoricalSampler, sample_categorical, sampling_warpers


def test_draws_follow_the_distribution_across_blocks_and_skip_excluded_entries():
    # 600 entries: three blocks of the two-level search, the last one partly padding
    probs = torch.zeros(600)
    probs[[0, 2, 3, 300, 511, 512, 599]] = torch.tensor([0.35, 0.15, 0.2, 0.1, 0.05, 0.1, 0.05])
    rows = 200_000
    scores = probs.log().expand(rows, -1).contiguous()  # excluded entries are -inf
    torch.manual_seed(0)
    tokens, log_probs = sample_categorical(scores)
    freq = torch.bincount(tokens, minlength=600).double() / rows
    assert set(freq.nonzero().flatten().tolist()) <= set(probs.nonzero().flatten().tolist())
    for token in probs.nonzero().flatten().tolist():
        p = float(probs[token])
        sigma = math.sqrt(p * (1 - p) / rows)
        assert abs(float(freq[token]) - p) < 5 * sigma, (token, float(freq[token]), p)
    assert torch.allclose(log_probs, probs.log()[tokens], atol=1e-5)


def test_log_probs_are_the_softmax_of_unnormalised_scores():
    g = torch.Generator().manual_seed(3)
    scores = torch.randn(16, 1000, generator=g) * 4 + 50  # large logits: the max is taken out before exp
    tokens, log_probs = sample_categorical(scores, generator=g)
    expected = torch.log_softmax(scores.double(), dim=-1).gather(1, tokens[:, None]).squeeze(1)
    assert torch.allclose(log_probs.double(), expected, atol=1e-5)


def test_a_row_without_any_weight_is_refused():
    scores = torch.zeros(2, 10)
    scores[1] = float("-inf")
    with pytest.raises(ValueError, match="cannot sample"):
        sample_categorical(scores)
    scores[1] = float("nan")
    with pytest.raises(ValueError, match="cannot sample"):
        sample_categorical(scores)


def test_the_processor_returns_a_row_whose_argmax_is_the_sampled_token_and_keeps_the_input():
    scores = torch.randn(4, 300)
    before = scores.clone()
    sampler = CategoricalSampler(record_log_probs=True)
    torch.manual_seed(1)
    out = sampler(torch.zeros(4, 1, dtype=torch.long), scores)
    torch.manual_seed(1)
    tokens, log_probs = sample_categorical(before)
    assert torch.equal(out.argmax(-1), tokens)
    assert torch.equal(scores, before)
    assert torch.isinf(out).sum() == 4 * 299
    assert torch.equal(sampler.step_log_probs(), log_probs[:, None])


def test_warpers_are_hfs_own_in_hfs_order_and_the_neutral_ones_left_out():
    assert sampling_warpers(1.0, 0, 1.0) == []
    names = [type(w).__name__ for w in sampling_warpers(0.7, 5, 0.9)]
    assert names == ["TemperatureLogitsWarper", "TopKLogitsWarper", "TopPLogitsWarper"]
    top_k = sampling_warpers(1.0, 1, 1.0)
    assert len(top_k) == 1 and isinstance(top_k[0], TopKLogitsWarper)


def test_hf_rollout_on_cpu_samples_without_torch_multinomial(model, monkeypatch):  # noqa: F811
    def refuse(*args, **kwargs):
        raise AssertionError("torch.multinomial was called")

    monkeypatch.setattr(torch, "multinomial", refuse)
    out = HFRollout(model, rollout_config(n=3)).generate_sequences(prompts())
    assert out.batch["responses"].shape[0] == 9


def test_top_k_of_one_samples_the_greedy_tokens(model):  # noqa: F811
    greedy = HFRollout(model, rollout_config()).generate_sequences(prompts(do_sample=False))
    sampled = HFRollout(model, rollout_config(top_k=1, n=2)).generate_sequences(prompts())
    assert torch.equal(sampled.batch["responses"][::2], greedy.batch["responses"])
    assert torch.equal(sampled.batch["responses"][1::2], greedy.batch["responses"])


def test_the_models_generation_defaults_neither_override_the_request_nor_draw_warnings(caplog):
    from transformers import GenerationConfig

    from tests.workers.rollout.test_hf_rollout import tiny_lm

    lm = tiny_lm()
    # an instruct model's defaults: with do_sample=False, generate would fill unset sampling flags from them and warn
    lm.generation_config = GenerationConfig(do_sample=True, temperature=0.5, top_k=3, top_p=0.8)
    request = rollout_config(top_k=1, n=2)  # top-k 1: the greedy tokens, whatever the model's own top_k says
    greedy = HFRollout(lm, rollout_config()).generate_sequences(prompts(do_sample=False))
    with caplog.at_level("WARNING"):
        sampled = HFRollout(lm, request).generate_sequences(prompts())
    assert torch.equal(sampled.batch["responses"][::2], greedy.batch["responses"])
    assert not [r for r in caplog.records if "not valid" in r.getMessage()]


def test_a_warper_the_sampler_does_not_apply_leaves_sampling_to_hf(monkeypatch):
    from transformers import GenerationConfig

    from tests.workers.rollout.test_hf_rollout import tiny_lm

    lm = tiny_lm()
    lm.generation_config = GenerationConfig(do_sample=True, min_p=0.1)
    calls = []
    real = torch.multinomial

    def counted(*args, **kwargs):
        calls.append(1)
        return real(*args, **kwargs)

    monkeypatch.setattr(torch, "multinomial", counted)
    HFRollout(lm, rollout_config(n=2)).generate_sequences(prompts())
    assert calls


def test_raw_logprobs_mode_gives_the_raw_logits_log_probs_under_the_cpu_sampler(model):  # noqa: F811
    from tests.workers.rollout.test_hf_rollout import P, recomputed_log_probs

    cfg = rollout_config(calculate_log_probs=True, logprobs_mode="raw_logprobs", temperature=0.7, n=2, dtype="float32")
    out = HFRollout(model, cfg).generate_sequences(prompts())
    mask = out.batch["attention_mask"][:, P:].bool()
    # raw: the model's own distribution, before the temperature the tokens were drawn at
    diff = (out.batch["rollout_log_probs"] - recomputed_log_probs(model, out, 1.0))[mask].abs().max().item()
    assert diff < 1e-5, diff
