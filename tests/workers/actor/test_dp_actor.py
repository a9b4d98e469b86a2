"""DataParallelPPOActor on a tiny Qwen2: log-probs, remove-padding, dynamic batching, the PPO update."""

import copy
import logging
import math

import pytest
import torch
import torch.nn.functional as F
from omegaconf import OmegaConf
from transformers import Qwen2Config, Qwen2ForCausalLM

from tests.plain_attention import bf16_update_through_both_forms
from verl.protocol import DataProto
from verl.utils.model import compute_position_id_with_mask
from verl.workers.actor import DataParallelPPOActor
from verl.workers.engine.fsdp import engine as engine_module

VOCAB, P, T, B = 96, 6, 5, 6
TEMPERATURE = 0.7


def tiny_lm(seed: int = 0) -> Qwen2ForCausalLM:
    torch.manual_seed(seed)
    cfg = Qwen2Config(
        vocab_size=VOCAB,
        hidden_size=32,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        intermediate_size=64,
        attn_implementation="sdpa",
    )
    return Qwen2ForCausalLM(cfg)


def rollout_batch(seed: int = 0) -> DataProto:
    """Left-padded prompts of lengths 1..P, right-padded responses of lengths 1..T (verl's rollout layout)."""
    g = torch.Generator().manual_seed(seed)
    prompt_lens = [6, 1, 3, 5, 2, 4]
    response_lens = [5, 2, 1, 4, 3, 5]
    input_ids = torch.randint(0, VOCAB, (B, P + T), generator=g)
    mask = torch.zeros(B, P + T, dtype=torch.long)
    for i, (pl, rl) in enumerate(zip(prompt_lens, response_lens)):
        mask[i, P - pl : P + rl] = 1
    input_ids = torch.where(mask.bool(), input_ids, torch.zeros_like(input_ids))
    batch = {
        "input_ids": input_ids,
        "attention_mask": mask,
        "position_ids": compute_position_id_with_mask(mask),
        "responses": input_ids[:, P:],
        "old_log_probs": -torch.rand(B, T, generator=g) - 1.0,
        "advantages": torch.randn(B, T, generator=g),
        "ref_log_prob": -torch.rand(B, T, generator=g) - 1.0,
    }
    return DataProto.from_dict(tensors=batch, meta_info={"temperature": TEMPERATURE})


def actor_config(**overrides):
    cfg = {
        "strategy": "fsdp",
        "ppo_mini_batch_size": 6,
        "ppo_micro_batch_size_per_gpu": 2,
        "use_dynamic_bsz": False,
        "ppo_max_token_len_per_gpu": 2 * (P + T),
        "grad_clip": 1.0,
        "clip_ratio": 0.2,
        "clip_ratio_low": 0.2,
        "clip_ratio_high": 0.28,
        "clip_ratio_c": 3.0,
        "policy_loss": {"loss_mode": "vanilla"},
        "loss_agg_mode": "token-mean",
        "entropy_coeff": 0.0,
        "use_kl_loss": False,
        "kl_loss_coef": 0.001,
        "kl_loss_type": "low_var_kl",
        "ppo_epochs": 1,
        "shuffle": False,
        "ulysses_sequence_parallel_size": 1,
        "use_remove_padding": False,
        "use_torch_compile": False,
    }
    cfg.update(overrides)
    return OmegaConf.create(cfg)


def log_prob_meta(data: DataProto, micro_batch_size=2, use_dynamic_bsz=False, max_token_len=None) -> DataProto:
    data.meta_info.update(
        micro_batch_size=micro_batch_size,
        use_dynamic_bsz=use_dynamic_bsz,
        max_token_len=max_token_len,
        temperature=TEMPERATURE,
    )
    return data


def response_mask(data: DataProto) -> torch.Tensor:
    return data.batch["attention_mask"][:, -T:].bool()


def test_log_probs_equal_hand_computation_per_row():
    model = tiny_lm()
    actor = DataParallelPPOActor(actor_config(), model)
    data = log_prob_meta(rollout_batch())
    log_probs, entropys = actor.compute_log_prob(data, calculate_entropy=True)
    assert log_probs.shape == entropys.shape == (B, T)
    for i in range(B):
        # Run each sequence alone, without any padding, and read the response tokens' log-softmax.
        valid = data.batch["attention_mask"][i].bool()
        ids = data.batch["input_ids"][i][valid].unsqueeze(0)
        with torch.no_grad():
            logits = model(input_ids=ids).logits[0] / TEMPERATURE
        n_prompt = int(valid[:P].sum())
        n_resp = int(valid[P:].sum())
        logp = F.log_softmax(logits, dim=-1)
        rows = torch.arange(n_prompt - 1, n_prompt - 1 + n_resp)
        expected = logp[rows, ids[0, n_prompt : n_prompt + n_resp]]
        expected_ent = -(logp.exp() * logp).sum(-1)[rows]
        torch.testing.assert_close(log_probs[i, :n_resp], expected, rtol=1e-5, atol=1e-5)
        torch.testing.assert_close(entropys[i, :n_resp], expected_ent, rtol=1e-5, atol=1e-5)


def test_use_torch_compile_compiles_the_entropy_and_changes_no_value():
    model = tiny_lm()
    eager = DataParallelPPOActor(actor_config(), model)
    compiled = DataParallelPPOActor(actor_config(use_torch_compile=True, entropy_coeff=0.01), model)
    assert compiled.engine._entropy_fn is engine_module._compiled_entropy  # what use_torch_compile=True changes
    assert eager.engine._entropy_fn is not engine_module._compiled_entropy
    engine_module._compiled_entropy_formula.cache_clear()  # compiled on first use, not when the engine is built
    data = log_prob_meta(rollout_batch())
    for with_grad in (False, True):  # the metric pass, and the update's pass that backpropagates through it
        with torch.set_grad_enabled(with_grad):
            _, want = eager._forward_micro_batch(data.batch, TEMPERATURE, calculate_entropy=True)
            _, got = compiled._forward_micro_batch(data.batch, TEMPERATURE, calculate_entropy=True)
        torch.testing.assert_close(got, want, rtol=1e-5, atol=1e-5)
    compiled_formula = engine_module._compiled_entropy_formula()
    assert engine_module._compiled_entropy_formula.cache_info().hits >= 1  # the update's entropy went through it
    assert hasattr(compiled_formula, "_torchdynamo_orig_callable")


def test_entropy_checkpointing_recomputes_the_differentiated_entropy_only(monkeypatch):
    """entropy_checkpointing wraps the entropy a loss differentiates in torch.utils.checkpoint, with the same values and
    gradients; the metric entropy (no grad) comes from the log-probs' pass and is never checkpointed."""
    calls = []
    checkpoint = torch.utils.checkpoint.checkpoint
    monkeypatch.setattr(torch.utils.checkpoint, "checkpoint", lambda *a, **k: calls.append(1) or checkpoint(*a, **k))
    data = log_prob_meta(rollout_batch())
    grads = []
    for checkpointing in (False, True):
        model = tiny_lm()
        actor = DataParallelPPOActor(actor_config(entropy_checkpointing=checkpointing, entropy_coeff=0.01), model)
        with torch.no_grad():
            actor._forward_micro_batch(data.batch, TEMPERATURE, calculate_entropy=True)
        assert not calls  # the metric pass
        entropy, _ = actor._forward_micro_batch(data.batch, TEMPERATURE, calculate_entropy=True)
        entropy.sum().backward()
        assert len(calls) == int(checkpointing)
        grads.append((entropy.detach(), [p.grad for p in model.parameters()]))
    (want, want_grads), (got, got_grads) = grads
    torch.testing.assert_close(got, want)
    for g, w in zip(got_grads, want_grads, strict=True):
        torch.testing.assert_close(g, w)


def test_remove_padding_equals_padded():
    model = tiny_lm()
    padded = DataParallelPPOActor(actor_config(), model)
    packed = DataParallelPPOActor(actor_config(use_remove_padding=True), model)
    data = log_prob_meta(rollout_batch(), micro_batch_size=3)
    lp_a, ent_a = padded.compute_log_prob(data, calculate_entropy=True)
    lp_b, ent_b = packed.compute_log_prob(data, calculate_entropy=True)
    m = response_mask(data)
    torch.testing.assert_close(lp_a[m], lp_b[m], rtol=1e-5, atol=1e-5)
    torch.testing.assert_close(ent_a[m], ent_b[m], rtol=1e-5, atol=1e-5)


def test_remove_padding_equals_padded_on_full_length_rows_with_the_per_sequence_attention(monkeypatch):
    # every response at the limit and prompts of one length: the packed row is runs of equal-length sequences,
    # attended per sequence (never over the whole row), and the lm-head runs on the response positions only
    model = tiny_lm()
    data = rollout_batch()
    data.batch["attention_mask"][:] = 1
    data.batch["position_ids"] = compute_position_id_with_mask(data.batch["attention_mask"])
    data = log_prob_meta(data, micro_batch_size=3)
    lp_a, ent_a = DataParallelPPOActor(actor_config(), model).compute_log_prob(data, calculate_entropy=True)
    lengths, head_rows = [], []
    sdpa, head = F.scaled_dot_product_attention, model.lm_head.forward
    monkeypatch.setattr(
        F, "scaled_dot_product_attention", lambda q, *a, **k: lengths.append(q.shape[-2]) or sdpa(q, *a, **k)
    )
    monkeypatch.setattr(model.lm_head, "forward", lambda h: head_rows.append(h.shape[-2]) or head(h))
    packed = DataParallelPPOActor(actor_config(use_remove_padding=True), model)
    lp_b, ent_b = packed.compute_log_prob(data, calculate_entropy=True)
    assert set(lengths) == {P + T} and head_rows == [3 * T, 3 * T]
    torch.testing.assert_close(lp_a, lp_b, rtol=1e-5, atol=1e-5)
    torch.testing.assert_close(ent_a, ent_b, rtol=1e-5, atol=1e-5)


def test_dynamic_bsz_equals_fixed_bsz():
    model = tiny_lm()
    actor = DataParallelPPOActor(actor_config(), model)
    fixed, _ = actor.compute_log_prob(log_prob_meta(rollout_batch(), micro_batch_size=2))
    # A budget of one padded sequence forces several, reordered micro batches.
    dyn_data = log_prob_meta(rollout_batch(), use_dynamic_bsz=True, max_token_len=P + T)
    dynamic, _ = actor.compute_log_prob(dyn_data)
    m = response_mask(dyn_data)
    torch.testing.assert_close(fixed[m], dynamic[m], rtol=1e-5, atol=1e-5)


def _one_update(config, seed=0, data=None):
    model = tiny_lm(seed)
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    actor = DataParallelPPOActor(config, model, opt)
    data = rollout_batch() if data is None else data
    metrics = actor.update_policy(data)
    return model, metrics


def test_update_policy_changes_params_and_reports_verl_metrics():
    cfg = actor_config(
        entropy_coeff=0.01, use_kl_loss=True, ppo_mini_batch_size=3, ppo_micro_batch_size_per_gpu=1, ppo_epochs=2
    )
    before = tiny_lm()
    model, metrics = _one_update(cfg)
    expected = {
        "actor/pg_loss",
        "actor/pg_clipfrac",
        "actor/ppo_kl",
        "actor/pg_clipfrac_lower",
        "actor/entropy",
        "actor/kl_loss",
        "actor/kl_coef",
        "actor/grad_norm",
        "actor/nonfinite_skipped",
    }
    assert set(metrics) == expected
    assert metrics["actor/nonfinite_skipped"] == [0.0]
    # 2 epochs x 2 mini batches = 4 optimizer steps; 3 micro batches of one row per mini batch.
    assert len(metrics["actor/grad_norm"]) == 4
    assert len(metrics["actor/pg_loss"]) == 12
    for values in metrics.values():
        assert all(torch.isfinite(torch.tensor(v)) for v in values)
    assert metrics["actor/kl_coef"][0] == pytest.approx(0.001)
    changed = [not torch.equal(a, b) for a, b in zip(model.parameters(), before.parameters())]
    assert all(changed)


def _grads_after_update(config, data):
    """The parameter change of one SGD(lr=1) step, i.e. minus the (clipped) gradient."""
    model, _ = _one_update(config, data=data)
    ref = tiny_lm()
    return [a.detach() - b.detach() for a, b in zip(model.parameters(), ref.parameters())]


@pytest.mark.parametrize(
    "variant",
    [
        {"ppo_micro_batch_size_per_gpu": 2},
        {"ppo_micro_batch_size_per_gpu": 3, "use_remove_padding": True},
        {"use_dynamic_bsz": True, "ppo_max_token_len_per_gpu": P + T},
    ],
)
def test_micro_batching_does_not_change_the_update(variant):
    # seq-mean-token-mean is a mean of per-sequence terms, so accumulation over micro batches (scaled by
    # 1/grad_accum, or by micro/mini size with dynamic batches) must equal one micro batch holding everything.
    base = dict(loss_agg_mode="seq-mean-token-mean", grad_clip=1e6)
    whole = _grads_after_update(actor_config(ppo_micro_batch_size_per_gpu=6, **base), rollout_batch())
    split = _grads_after_update(actor_config(**base, **variant), rollout_batch())
    for a, b in zip(whole, split):
        torch.testing.assert_close(a, b, rtol=1e-4, atol=1e-6)


def test_non_finite_grad_norm_skips_the_step(caplog):
    data = rollout_batch()
    data.batch["advantages"][0, 0] = float("nan")
    with caplog.at_level(logging.WARNING):
        model, metrics = _one_update(actor_config(), data=data)
    assert "actor update at global step None, mini batch 0: non-finite loss (micro batch 0 loss=nan" in caplog.text
    assert not all(torch.isfinite(torch.tensor(metrics["actor/grad_norm"])))
    # one mini batch of all 6 rows: its one update is skipped
    assert metrics["actor/nonfinite_skipped"] == [1.0]
    for a, b in zip(model.parameters(), tiny_lm().parameters()):
        assert torch.equal(a, b)


def test_update_policy_requires_temperature_and_optimizer():
    data = rollout_batch()
    del data.meta_info["temperature"]
    model = tiny_lm()
    with pytest.raises(KeyError, match="temperature"):
        DataParallelPPOActor(actor_config(), model, torch.optim.SGD(model.parameters(), lr=0.1)).update_policy(data)
    with pytest.raises(RuntimeError, match="reference policy"):
        DataParallelPPOActor(actor_config(), model).update_policy(rollout_batch())


def test_reference_actor_is_a_copy_that_does_not_train():
    model = tiny_lm()
    ref = DataParallelPPOActor(actor_config(), copy.deepcopy(model))
    lp, ent = ref.compute_log_prob(log_prob_meta(rollout_batch()))
    assert ent is None and lp.shape == (B, T)


BUILT_IN_LOSSES = ["vanilla", "clip_cov", "kl_cov", "gspo", "gpg", "geo_mean", "sapo", "cispo"]


@pytest.mark.parametrize("loss_mode", BUILT_IN_LOSSES + ["my_recipe_loss"])
def test_update_dispatches_every_loss_mode_through_the_registry(loss_mode, monkeypatch):
    """The actor calls whatever the registry holds under loss_mode (vanilla too, and a recipe's own loss) with the
    micro batch, loss_agg_mode and its typed config, and reports that loss as actor/pg_loss."""
    from verl.trainer.config import ActorConfig
    from verl.trainer.ppo import core_algos

    registry = core_algos.POLICY_LOSS_REGISTRY
    real = registry.get(loss_mode, registry["gpg"])
    calls = []

    def spy(old_log_prob, log_prob, advantages, response_mask, loss_agg_mode, config):
        out = real(old_log_prob, log_prob, advantages, response_mask, loss_agg_mode, config)
        calls.append((loss_agg_mode, config, out[0].item(), log_prob.requires_grad))
        return out

    monkeypatch.setitem(registry, loss_mode, spy)
    policy_loss = {"loss_mode": loss_mode, "clip_cov_ratio": 0.2, "clip_cov_lb": -10.0, "clip_cov_ub": 10.0}
    policy_loss.update(kl_cov_ratio=0.2, ppo_kl_coef=0.1)
    model, metrics = _one_update(actor_config(policy_loss=policy_loss, loss_agg_mode="seq-mean-token-mean"))
    assert len(calls) == B // 2  # one call per micro batch of 2
    assert metrics["actor/pg_loss"] == pytest.approx([c[2] for c in calls])
    for agg, cfg, _, grad in calls:
        assert agg == "seq-mean-token-mean" and grad
        assert isinstance(cfg, ActorConfig) and cfg.policy_loss.loss_mode == loss_mode
    assert all(torch.isfinite(torch.tensor(metrics[k])).all() for k in metrics)
    assert any(not torch.equal(a, b) for a, b in zip(model.parameters(), tiny_lm().parameters()))


def test_micro_batch_size_must_divide_mini_batch():
    with pytest.raises(ValueError, match=r"actor.ppo_mini_batch_size=6 .* actor.ppo_micro_batch_size_per_gpu=4"):
        _one_update(actor_config(ppo_micro_batch_size_per_gpu=4))


@pytest.mark.parametrize("use_kl_loss", [False, True])
def test_on_policy_update_without_old_log_probs_equals_the_separate_pass(use_kl_loss):
    """One epoch over one mini batch: taking the old log-probs from the update's own forward (no separate pass)
    gives the same parameters and loss as recomputing them first, as the trainer did before."""
    cfg = actor_config(use_kl_loss=use_kl_loss)
    results = []
    for separate_pass in (True, False):
        model = tiny_lm()
        actor = DataParallelPPOActor(cfg, model, torch.optim.SGD(model.parameters(), lr=0.5))
        data = rollout_batch()
        if separate_pass:
            data.batch["old_log_probs"], _ = actor.compute_log_prob(log_prob_meta(copy.deepcopy(data)))
        else:
            data.pop(batch_keys=["old_log_probs"])
        metrics = actor.update_policy(data)
        results.append((metrics, {k: v.detach().clone() for k, v in model.state_dict().items()}))
    (m_sep, p_sep), (m_on, p_on) = results
    for name in p_sep:
        torch.testing.assert_close(p_sep[name], p_on[name], rtol=0, atol=1e-6)
    assert m_sep["actor/pg_loss"] == pytest.approx(m_on["actor/pg_loss"], abs=1e-6)
    assert "actor/entropy" in m_on and all(v > 0 for v in m_on["actor/entropy"])
    changed = any(not torch.equal(p_on[k], tiny_lm().state_dict()[k]) for k in p_on)
    assert changed, "the update must move the parameters"


def test_an_update_without_old_log_probs_is_refused_beyond_one_on_policy_pass():
    model = tiny_lm()
    data = rollout_batch()
    data.pop(batch_keys=["old_log_probs"])
    actor = DataParallelPPOActor(actor_config(ppo_epochs=2), model, torch.optim.SGD(model.parameters(), lr=0.1))
    with pytest.raises(ValueError, match="ppo_epochs=2"):
        actor.update_policy(data)
    actor = DataParallelPPOActor(actor_config(ppo_mini_batch_size=3), model, torch.optim.SGD(model.parameters()))
    with pytest.raises(ValueError, match="mini batch of 3"):
        actor.update_policy(copy.deepcopy(data))


def test_columns_of_padding_in_every_row_are_trimmed_without_changing_results():
    """Prompts shorter than P and responses shorter than T in every row: the actor runs on the trimmed width, and
    log-probs and entropies equal a forward over the full padded width."""
    data = rollout_batch()
    mask = data.batch["attention_mask"]
    mask[:, :2] = 0  # every prompt at most P - 2 tokens
    mask[:, -2:] = 0  # every response at most T - 2 tokens
    data.batch["position_ids"] = compute_position_id_with_mask(mask)
    model = tiny_lm()
    log_probs, entropys = DataParallelPPOActor(actor_config(), model).compute_log_prob(
        log_prob_meta(data, micro_batch_size=3), calculate_entropy=True
    )
    with torch.no_grad():
        full = (
            model(
                input_ids=data.batch["input_ids"], attention_mask=mask, position_ids=data.batch["position_ids"]
            ).logits[:, P - 1 : -1]
            / TEMPERATURE
        )
    logp = F.log_softmax(full, dim=-1)
    expected = logp.gather(-1, data.batch["responses"].unsqueeze(-1)).squeeze(-1)
    m = response_mask(data)
    torch.testing.assert_close(log_probs[m], expected[m], rtol=1e-5, atol=1e-5)
    torch.testing.assert_close(entropys[m], -(logp.exp() * logp).sum(-1)[m], rtol=1e-5, atol=1e-5)
    assert (log_probs[:, -2:] == 0).all()  # the trimmed response columns hold no token of any row


def test_cpu_micro_batches_hand_freed_memory_back_between_forward_and_backward(monkeypatch):
    """On CPU the actor's engine trims glibc's heaps after each log-prob micro batch, and before and after each
    backward, so one micro batch's freed tensors do not stay resident beside the next allocations (the effect itself:
    tests/utils/test_host_memory.py)."""
    import verl.workers.engine.fsdp.engine as fsdp_engine

    calls = []
    monkeypatch.setattr(fsdp_engine, "release_freed_host_memory", lambda: calls.append(1))
    model = tiny_lm()
    actor = DataParallelPPOActor(actor_config(), model, torch.optim.SGD(model.parameters(), lr=0.1))
    actor.compute_log_prob(log_prob_meta(rollout_batch(), micro_batch_size=2))
    assert len(calls) == B // 2
    calls.clear()
    actor.update_policy(rollout_batch())  # mini batch 6, micro batch 2: three backward passes
    assert len(calls) == 2 * (B // 2)


def test_bf16_update_on_cpu_attends_through_the_plain_form_and_matches_sdpa(monkeypatch):
    """A bf16 model with gradient checkpointing: the update runs attention in verl's CPU form (forward and the
    backward's recompute) and lands within bf16 rounding of the same update through sdpa (a step that moves most
    weights by a few bf16 steps may differ by one)."""
    calls, difference = bf16_update_through_both_forms(
        monkeypatch,
        tiny_lm,
        lambda model: DataParallelPPOActor(actor_config(), model, torch.optim.SGD(model.parameters(), lr=1.0)),
        lambda actor: actor.update_policy(rollout_batch()),
    )
    assert calls == 3 * 2 * 2  # 3 micro batches x 2 layers, in the forward and again in the backward's recompute
    assert difference < 0.1


# ---- rollout correction (algorithm.rollout_correction): weights and rejection reach the loss ----
def _with_correction(data: DataProto, weights=None, kept_mask=None) -> DataProto:
    data = copy.deepcopy(data)
    if weights is not None:
        data.batch["rollout_is_weights"] = weights
    if kept_mask is not None:
        data.batch["response_mask"] = kept_mask
    return data


def test_unit_is_weights_and_the_full_mask_leave_the_update_unchanged():
    cfg = actor_config(ppo_mini_batch_size=6, ppo_micro_batch_size_per_gpu=3)
    data = rollout_batch()
    mask = response_mask(data).long()
    plain, plain_metrics = _one_update(cfg, data=data)
    corrected, corrected_metrics = _one_update(cfg, data=_with_correction(data, mask.float(), mask))
    for a, b in zip(plain.parameters(), corrected.parameters()):
        assert torch.equal(a, b)
    assert plain_metrics["actor/pg_loss"] == corrected_metrics["actor/pg_loss"]


def test_is_weights_scale_the_gradient():
    cfg = actor_config(ppo_mini_batch_size=6, ppo_micro_batch_size_per_gpu=6, grad_clip=1e6)
    data = rollout_batch()
    plain = _grads_after_update(cfg, data)
    doubled = _grads_after_update(cfg, _with_correction(data, weights=2 * response_mask(data).float()))
    assert max(a.abs().max().item() for a in plain) > 1e-3  # a real step, far above the tolerance below
    for a, b in zip(plain, doubled):
        # atol: the step is read as a difference of float32 parameters (~1e-7 resolution)
        torch.testing.assert_close(b, 2 * a, rtol=1e-4, atol=1e-6)


def test_rejected_rows_leave_the_loss_as_if_they_were_not_there():
    base = dict(grad_clip=1e6, loss_agg_mode="token-mean")
    data = rollout_batch()
    kept = response_mask(data).long()
    kept[0] = 0  # rejection sampling dropped row 0
    rejected = _grads_after_update(
        actor_config(ppo_micro_batch_size_per_gpu=6, **base), _with_correction(data, None, kept)
    )
    rest = data[1:]
    without = _grads_after_update(actor_config(ppo_mini_batch_size=5, ppo_micro_batch_size_per_gpu=5, **base), rest)
    assert max(a.abs().max().item() for a in without) > 1e-4
    for a, b in zip(rejected, without):
        torch.testing.assert_close(a, b, rtol=1e-4, atol=1e-6)


@pytest.mark.parametrize(
    "variant",
    [
        {"ppo_micro_batch_size_per_gpu": 2},
        {"ppo_micro_batch_size_per_gpu": 3, "use_remove_padding": True},
        {"use_dynamic_bsz": True, "ppo_max_token_len_per_gpu": P + T},
    ],
)
def test_correction_travels_with_its_rows_through_micro_batches(variant):
    # a whole row and one token rejected, uneven weights: splitting, unpadding or reordering rows must not move them
    data = rollout_batch()
    weights = (torch.rand(B, T, generator=torch.Generator().manual_seed(5)) + 0.5) * response_mask(data).float()
    kept = response_mask(data).long()
    kept[2], kept[4, 1] = 0, 0
    data = _with_correction(data, weights, kept)
    base = dict(loss_agg_mode="seq-mean-token-mean", grad_clip=1e6)
    whole = _grads_after_update(actor_config(ppo_micro_batch_size_per_gpu=6, **base), data)
    split = _grads_after_update(actor_config(**base, **variant), data)
    assert max(a.abs().max().item() for a in whole) > 1e-4  # finite and a real step (an empty row gave NaN before)
    for a, b in zip(whole, split):
        torch.testing.assert_close(a, b, rtol=1e-4, atol=1e-6)


def test_calculate_entropy_logs_the_entropy_and_leaves_the_update_alone():
    """calculate_entropy=True with entropy_coeff=0 measures actor/entropy in the update, without a bonus."""
    plain_model, plain = _one_update(actor_config())
    measured_model, measured = _one_update(actor_config(calculate_entropy=True))
    assert "actor/entropy" not in plain and len(measured["actor/entropy"]) == 3  # one per micro batch
    assert all(0 < e < math.log(tiny_lm().config.vocab_size) + 1e-4 for e in measured["actor/entropy"])
    for got, want in zip(measured_model.parameters(), plain_model.parameters(), strict=True):
        torch.testing.assert_close(got, want)


def test_chunked_entropy_takes_the_configured_chunk_size():
    model = tiny_lm()
    chunked = DataParallelPPOActor(
        actor_config(entropy_from_logits_with_chunking=True, entropy_from_logits_chunk_size=3), model
    )
    assert chunked.engine._entropy_fn.keywords == {"chunk_size": 3}
    data = log_prob_meta(rollout_batch())
    with torch.no_grad():
        want, _ = DataParallelPPOActor(actor_config(), model)._forward_micro_batch(data.batch, TEMPERATURE, True)
        got, _ = chunked._forward_micro_batch(data.batch, TEMPERATURE, calculate_entropy=True)
    torch.testing.assert_close(got, want, rtol=1e-5, atol=1e-5)
