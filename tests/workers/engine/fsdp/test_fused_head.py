"""use_fused_kernels=True: log-probs and entropy from the hidden states, chunked, equal to the logits path."""

import pytest
import torch
import torch.nn.functional as F

from tests.workers.actor.test_dp_actor import (
    TEMPERATURE,
    actor_config,
    log_prob_meta,
    response_mask,
    rollout_batch,
    tiny_lm,
)
from verl.workers.actor import DataParallelPPOActor
from verl.workers.engine.fsdp.fused_head import check_fusable_head, fused_linear_logprobs


def _reference(hidden, weight, labels, temperature):
    logp = F.log_softmax(hidden @ weight.T / temperature, dim=-1)
    return logp.gather(-1, labels.unsqueeze(-1)).squeeze(-1), -(logp.exp() * logp).sum(-1)


@pytest.mark.parametrize("chunk_rows", [None, 3])
def test_values_and_gradients_equal_the_full_logits(chunk_rows):
    g = torch.Generator().manual_seed(0)
    hidden = torch.randn(2, 7, 16, generator=g, dtype=torch.float64, requires_grad=True)
    weight = torch.randn(50, 16, generator=g, dtype=torch.float64, requires_grad=True)
    labels = torch.randint(0, 50, (2, 7), generator=g)
    a, b = torch.randn(2, 7, generator=g, dtype=torch.float64), torch.randn(2, 7, generator=g, dtype=torch.float64)

    want_lp, want_ent = _reference(hidden, weight, labels, 0.7)
    want_grads = torch.autograd.grad((want_lp * a).sum() + (want_ent * b).sum(), (hidden, weight))
    got_lp, got_ent = fused_linear_logprobs(hidden, weight, labels, 0.7, with_entropy=True, chunk_rows=chunk_rows)
    got_grads = torch.autograd.grad((got_lp * a).sum() + (got_ent * b).sum(), (hidden, weight))

    torch.testing.assert_close(got_lp, want_lp)
    torch.testing.assert_close(got_ent, want_ent)
    for got, want in zip(got_grads, want_grads):
        torch.testing.assert_close(got, want, rtol=1e-5, atol=1e-6)


def test_saved_for_backward_is_linear_in_the_vocabulary_not_tokens_times_vocabulary():
    """The point of fusing: the (tokens, vocab) logits are neither kept for the backward nor built whole."""
    tokens, hidden_size, vocab = 64, 8, 4096
    hidden = torch.randn(tokens, hidden_size, requires_grad=True)
    weight = torch.randn(vocab, hidden_size, requires_grad=True)
    labels = torch.randint(0, vocab, (tokens,))
    saved = []

    def pack(t):
        saved.append(t.numel() * t.element_size())
        return t

    with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
        fused_linear_logprobs(hidden, weight, labels, with_entropy=True)
    fused_bytes, saved[:] = sum(saved), []
    with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
        F.log_softmax(hidden @ weight.T, dim=-1)
    logits_bytes = tokens * vocab * 4
    assert sum(saved) >= logits_bytes  # the unfused graph keeps the logits
    assert fused_bytes < logits_bytes / 4  # inputs and per-row statistics only


@pytest.mark.parametrize("use_remove_padding", [False, True])
def test_actor_log_probs_and_entropy_equal_the_unfused_path(use_remove_padding):
    model = tiny_lm()
    data = log_prob_meta(rollout_batch(), micro_batch_size=3)
    plain = DataParallelPPOActor(actor_config(use_remove_padding=use_remove_padding), model)
    fused = DataParallelPPOActor(actor_config(use_remove_padding=use_remove_padding, use_fused_kernels=True), model)
    lp_a, ent_a = plain.compute_log_prob(data, calculate_entropy=True)
    lp_b, ent_b = fused.compute_log_prob(data, calculate_entropy=True)
    m = response_mask(data)
    torch.testing.assert_close(lp_b[m], lp_a[m], rtol=1e-5, atol=1e-5)
    torch.testing.assert_close(ent_b[m], ent_a[m], rtol=1e-5, atol=1e-5)
    assert lp_b.shape == ent_b.shape == lp_a.shape


def test_packed_fused_head_runs_on_the_response_positions_only(monkeypatch):
    from verl.workers.engine.fsdp import fused_head

    model = tiny_lm()
    data = log_prob_meta(rollout_batch(), micro_batch_size=len(rollout_batch()))
    head_rows = []
    inner = fused_head.fused_linear_logprobs
    monkeypatch.setattr(
        fused_head, "fused_linear_logprobs", lambda h, *a, **k: head_rows.append(h.shape[-2]) or inner(h, *a, **k)
    )
    fused = DataParallelPPOActor(actor_config(use_remove_padding=True, use_fused_kernels=True), model)
    fused.compute_log_prob(data)
    logits_rows = []
    head = model.lm_head.forward
    monkeypatch.setattr(model.lm_head, "forward", lambda h: logits_rows.append(h.shape[-2]) or head(h))
    DataParallelPPOActor(actor_config(use_remove_padding=True), model).compute_log_prob(data)
    # the same positions as the logits path reads: those among each row's last T + 1 but one, fewer than all tokens
    assert head_rows == logits_rows and head_rows[0] < int(data.batch["attention_mask"].sum())


@pytest.mark.parametrize("use_remove_padding", [False, True])
@pytest.mark.parametrize("tied", [False, True])
def test_update_equals_the_unfused_update(use_remove_padding, tied):
    """Same parameters after one SGD step, with the entropy bonus and the KL loss backpropagating through the head
    (and, tied, through the shared embedding)."""
    cfg = dict(entropy_coeff=0.01, use_kl_loss=True, grad_clip=1e6, use_remove_padding=use_remove_padding)
    models = []
    for fused in (False, True):
        model = tiny_lm()
        if tied:
            model.config.tie_word_embeddings = True
            model.lm_head.weight = model.model.embed_tokens.weight
        opt = torch.optim.SGD(model.parameters(), lr=1.0)
        actor = DataParallelPPOActor(actor_config(use_fused_kernels=fused, **cfg), model, opt)
        actor.update_policy(rollout_batch())
        models.append(model)
    before = tiny_lm()
    for (name, a), b, ref in zip(models[0].named_parameters(), models[1].parameters(), before.parameters()):
        assert not torch.equal(a, ref) or name.endswith("lm_head.weight"), name
        torch.testing.assert_close(b, a, rtol=1e-4, atol=1e-6, msg=name)
    # the head is back to computing logits once the actor is done with it
    assert models[1](input_ids=torch.tensor([[1, 2]])).logits.shape == (1, 2, models[1].config.vocab_size)


def test_a_model_that_transforms_its_logits_is_refused():
    model = tiny_lm()
    model.config.final_logit_softcapping = 30.0
    with pytest.raises(ValueError, match="final_logit_softcapping=30.0"):
        check_fusable_head(model)
    with pytest.raises(ValueError, match="use_fused_kernels"):
        DataParallelPPOActor(actor_config(use_fused_kernels=True), model)


def test_temperature_is_applied_before_the_softmax():
    model = tiny_lm()
    data = log_prob_meta(rollout_batch(), micro_batch_size=6)
    fused = DataParallelPPOActor(actor_config(use_fused_kernels=True), model)
    hot, _ = fused.compute_log_prob(data)
    data.meta_info["temperature"] = 1.0
    cold, _ = fused.compute_log_prob(data)
    m = response_mask(data)
    assert TEMPERATURE != 1.0 and not torch.allclose(hot[m], cold[m])


def test_a_forward_that_skips_the_output_head_is_an_error_not_a_silent_none():
    from verl.workers.engine.fsdp.fused_head import fused_output_head

    model = tiny_lm()
    with pytest.raises(RuntimeError, match="never called its output head"):
        with fused_output_head(model, torch.zeros(1, 1, dtype=torch.long), 1.0, with_entropy=False, kept=1):
            model.model(input_ids=torch.tensor([[1, 2]]))  # the decoder alone: no head
    assert "forward" not in model.lm_head.__dict__  # the head is restored even so
