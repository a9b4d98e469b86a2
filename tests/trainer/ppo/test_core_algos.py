"""verl.trainer.ppo.core_algos: advantage estimators and their registry (hand-worked values, per-sample reference
loops, invariants), the trainer-side steps (response mask, in-reward KL penalty, advantage dispatch), KL penalties
and controllers, PF-PPO resampling."""

import math
from collections import defaultdict

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st
from omegaconf import OmegaConf

from verl import DataProto
from verl.trainer.ppo import core_algos
from verl.trainer.ppo.core_algos import AdvantageEstimator
from verl.utils import torch_functional as verl_F

EPS = 1e-6


def _uids(*names):
    return np.array(names, dtype=object)


# ---------------------------------------------------------------- per-sample reference loops (spec formulas)
def _groups(scores, index):
    by = defaultdict(list)
    for i, uid in enumerate(index):
        by[uid].append(scores[i])
    return {k: torch.stack(v) for k, v in by.items()}


def ref_grpo(r, m, index, norm=True):
    scores = r.sum(-1)
    g = _groups(scores, index)
    out = torch.zeros_like(scores)
    for i, uid in enumerate(index):
        vals = g[uid]
        mean, std = (torch.tensor(0.0), torch.tensor(1.0)) if len(vals) == 1 else (vals.mean(), vals.std())
        out[i] = (scores[i] - mean) / (std + EPS) if norm else scores[i] - mean
    return out.unsqueeze(-1) * m


def ref_rloo(r, m, index):
    scores = r.sum(-1)
    g = _groups(scores, index)
    out = torch.zeros_like(scores)
    for i, uid in enumerate(index):
        n = len(g[uid])
        out[i] = scores[i] if n == 1 else scores[i] - (g[uid].sum() - scores[i]) / (n - 1)
    return out.unsqueeze(-1) * m


def ref_opo(r, m, index):
    scores, lengths = r.sum(-1), m.sum(-1)
    out = torch.zeros_like(scores)
    for i, uid in enumerate(index):
        members = [j for j, u in enumerate(index) if u == uid]
        if len(members) > 1:
            b = sum(lengths[j] * scores[j] for j in members) / sum(lengths[j] for j in members)
        else:
            b = 0.0
        out[i] = scores[i] - b
    return out.unsqueeze(-1) * m


def ref_gpg(r, m, index):
    scores = r.sum(-1)
    g = _groups(scores, index)
    alpha = len(scores) / max(1, int((scores != 0).sum()))
    out = torch.zeros_like(scores)
    for i, uid in enumerate(index):
        mean = 0.0 if len(g[uid]) == 1 else g[uid].mean()
        out[i] = alpha * (scores[i] - mean)
    return out.unsqueeze(-1) * m


def ref_reinforce_pp_returns(r, m, gamma):
    returns = torch.zeros_like(r)
    for i in range(r.shape[0]):
        running = 0.0
        for t in reversed(range(r.shape[1])):
            running = r[i, t] + gamma * running
            returns[i, t] = running
            running = running * m[i, t]
    return returns


def ref_gae(r, v, m, gamma, lam):
    adv = torch.zeros_like(r)
    for i in range(r.shape[0]):
        next_v, last = 0.0, 0.0
        for t in reversed(range(r.shape[1])):
            if m[i, t]:
                last = r[i, t] + gamma * next_v - v[i, t] + gamma * lam * last
                next_v = v[i, t]
            adv[i, t] = last
    return adv, adv + v


batch_strategy = st.integers(0, 10_000).flatmap(
    lambda seed: st.tuples(st.just(seed), st.integers(2, 8), st.integers(1, 5), st.integers(1, 4))
)


def _random_batch(seed, bs, T, n_groups, prefix_mask=True):
    g = torch.Generator().manual_seed(seed)
    r = torch.randint(-2, 3, (bs, T), generator=g).double() * torch.rand(bs, T, generator=g, dtype=torch.float64)
    if prefix_mask:
        lengths = torch.randint(1, T + 1, (bs,), generator=g)
        m = (torch.arange(T) < lengths[:, None]).double()
    else:
        m = (torch.rand(bs, T, generator=g) > 0.3).double()
        m[:2, 0] = 1  # two valid tokens in the batch, so whitening's unbiased variance is defined
    index = np.array([f"uid-{int(k)}" for k in torch.randint(0, n_groups, (bs,), generator=g)], dtype=object)
    return r, m, index


# ---------------------------------------------------------------- registry
def test_enum_values_compare_as_strings():
    assert AdvantageEstimator.GRPO == "grpo" and "gae" == AdvantageEstimator.GAE
    assert {e.value for e in AdvantageEstimator} == {
        "gae", "grpo", "reinforce_plus_plus", "reinforce_plus_plus_baseline", "remax", "rloo", "opo", "grpo_passk",
        "gpg",
    }  # fmt: skip
    for est in AdvantageEstimator:
        assert core_algos.get_adv_estimator_fn(est) is core_algos.get_adv_estimator_fn(est.value)


def test_registry_uses_module_dict_at_call_time(monkeypatch):
    monkeypatch.setattr(core_algos, "ADV_ESTIMATOR_REGISTRY", {})

    def fn(**kwargs):
        return "x"

    def other(**kwargs):
        return "y"

    assert core_algos.register_adv_est("mine")(fn) is fn
    assert core_algos.ADV_ESTIMATOR_REGISTRY == {"mine": fn}
    core_algos.register_adv_est("mine")(fn)  # same function again is fine
    with pytest.raises(ValueError, match="mine"):
        core_algos.register_adv_est("mine")(other)
    core_algos.register_adv_est(AdvantageEstimator.RLOO)(other)
    assert core_algos.get_adv_estimator_fn("rloo") is other
    with pytest.raises(ValueError, match="Unknown advantage estimator simply: grpo"):
        core_algos.get_adv_estimator_fn("grpo")


def test_unknown_and_case_sensitive_lookup():
    with pytest.raises(ValueError, match="Unknown advantage estimator simply: GRPO"):
        core_algos.get_adv_estimator_fn("GRPO")


# ---------------------------------------------------------------- hand-worked values
def test_grpo_by_hand_and_dr_grpo():
    r = torch.tensor([[0.0, 1.0, 0.0], [0.0, 0.0, 0.0], [3.0, 0.0, 0.0]])
    m = torch.tensor([[1.0, 1.0, 0.0], [1.0, 1.0, 1.0], [1.0, 0.0, 0.0]])
    adv, ret = core_algos.compute_grpo_outcome_advantage(r, m, _uids("a", "a", "b"))
    half = 0.5 / (math.sqrt(0.5) + EPS)  # group a: scores 1, 0 -> mean .5, unbiased std sqrt(.5)
    expected = torch.tensor([[half, half, 0.0], [-half, -half, -half], [3.0 / (1 + EPS), 0.0, 0.0]])
    assert torch.allclose(adv, expected) and adv is ret
    adv, _ = core_algos.compute_grpo_outcome_advantage(r, m, _uids("a", "a", "b"), norm_adv_by_std_in_grpo=False)
    assert torch.allclose(adv, torch.tensor([[0.5, 0.5, 0.0], [-0.5, -0.5, -0.5], [3.0, 0.0, 0.0]]))


def test_grpo_identical_scores_give_zero():
    r = torch.ones(3, 2)
    adv, _ = core_algos.compute_grpo_outcome_advantage(r, torch.ones(3, 2), _uids("a", "a", "a"))
    assert torch.equal(adv, torch.zeros(3, 2))


def test_grpo_passk_by_hand():
    r = torch.tensor([[1.0], [3.0], [2.0], [5.0], [5.0]])
    m = torch.ones(5, 1)
    idx = _uids("a", "a", "a", "b", "b")
    adv, ret = core_algos.compute_grpo_passk_outcome_advantage(r, m, idx, config={})
    # group a: best 3, second 2, std 1 -> 1/(1+eps) on row 1 only; group b: tie -> 0
    assert torch.allclose(adv.flatten(), torch.tensor([0.0, 1 / (1 + EPS), 0.0, 0.0, 0.0])) and adv is ret
    adv, _ = core_algos.compute_grpo_passk_outcome_advantage(r, m, idx, config={"norm_adv_by_std_in_grpo": False})
    assert torch.allclose(adv.flatten(), torch.tensor([0.0, 1.0, 0.0, 0.0, 0.0]))
    with pytest.raises(AssertionError, match="config"):
        core_algos.compute_grpo_passk_outcome_advantage(r, m, idx)
    with pytest.raises(ValueError, match="at least 2 samples.*'c'"):
        core_algos.compute_grpo_passk_outcome_advantage(r[:4], m[:4], _uids("a", "a", "c", "b"), config={})


def test_rloo_opo_by_hand():
    r = torch.tensor([[1.0, 0.0], [0.0, 0.0], [2.0, 0.0], [7.0, 0.0]])
    m = torch.tensor([[1.0, 1.0], [1.0, 0.0], [1.0, 1.0], [1.0, 1.0]])
    idx = _uids("a", "a", "a", "z")
    adv, ret = core_algos.compute_rloo_outcome_advantage(r, m, idx)
    # group a scores 1, 0, 2: each minus the mean of the other two; singleton keeps its score
    assert torch.allclose(adv, torch.tensor([[0.0, 0.0], [-1.5, 0.0], [1.5, 1.5], [7.0, 7.0]])) and adv is ret
    adv, _ = core_algos.compute_opo_outcome_advantage(r, m, idx)
    b = (2 * 1 + 1 * 0 + 2 * 2) / 5  # length-weighted group mean
    expected = torch.tensor([[1 - b, 1 - b], [-b, 0.0], [2 - b, 2 - b], [7.0, 7.0]])
    assert torch.allclose(adv, expected)


def test_gpg_by_hand():
    r = torch.tensor([[1.0, 0.0], [0.0, 0.0], [2.0, 0.0], [0.0, 0.0], [3.0, 0.0]])
    m = torch.tensor([[1.0, 1.0], [1.0, 0.0], [1.0, 1.0], [1.0, 1.0], [1.0, 0.0]])
    idx = _uids("a", "a", "a", "b", "z")
    adv, ret = core_algos.compute_gpg_outcome_advantage(r, m, idx)
    # scores 1, 0, 2 | 0 | 3: three of five non-zero -> alpha = 5/3; group a mean 1 (no std division), group b
    # mean 0, the singleton z keeps mean 0
    a = 5 / 3
    expected = torch.tensor([[0.0, 0.0], [-a, 0.0], [a, a], [0.0, 0.0], [3 * a, 0.0]])
    assert torch.allclose(adv, expected) and adv is ret
    assert core_algos.get_adv_estimator_fn("gpg") is core_algos.compute_gpg_outcome_advantage
    # verl's signature: f_norm divides; a caller's alpha is ignored (it comes from the batch)
    adv, _ = core_algos.compute_gpg_outcome_advantage(r, m, idx, f_norm=2.0, alpha=100.0)
    assert torch.allclose(adv, expected / 2)
    # every score zero: alpha falls back to bs / 1 and every advantage is 0
    adv, _ = core_algos.compute_gpg_outcome_advantage(torch.zeros(2, 2), torch.ones(2, 2), _uids("a", "a"))
    assert torch.equal(adv, torch.zeros(2, 2))


def test_groups_of_one_give_the_score_as_the_advantage():
    """rollout.n=1: every uid holds one response. As in verl, a group of one has mean 0 (GRPO: std 1), so each group
    estimator passes the score through: GRPO over 1 + eps, GPG times bs / #non-zero, REINFORCE++-baseline whitened
    over the batch."""
    r = torch.tensor([[0.0, 2.0, 0.0], [1.0, 0.0, 0.0], [0.0, 0.0, 0.0], [0.0, 0.0, -1.0]])
    m = torch.tensor([[1.0, 1.0, 0.0], [1.0, 0.0, 0.0], [1.0, 1.0, 1.0], [1.0, 1.0, 1.0]])
    idx = _uids("a", "b", "c", "d")
    scores = torch.tensor([2.0, 1.0, 0.0, -1.0]).unsqueeze(-1)
    grpo, _ = core_algos.compute_grpo_outcome_advantage(r, m, idx)
    assert torch.allclose(grpo, scores / (1 + EPS) * m)
    for fn in (core_algos.compute_rloo_outcome_advantage, core_algos.compute_opo_outcome_advantage):
        assert torch.allclose(fn(r, m, idx)[0], scores * m), fn.__name__
    gpg, _ = core_algos.compute_gpg_outcome_advantage(r, m, idx)
    assert torch.allclose(gpg, 4 / 3 * scores * m)  # three of four scores are non-zero
    baseline, _ = core_algos.compute_reinforce_plus_plus_baseline_outcome_advantage(r, m, idx)
    assert torch.allclose(baseline, verl_F.masked_whiten(scores * m, m) * m)
    with pytest.raises(ValueError, match="at least 2 samples"):
        core_algos.compute_grpo_passk_outcome_advantage(r, m, idx, config={})


def test_remax_by_hand():
    r = torch.tensor([[1.0, 0.0, 2.0], [0.0, 1.0, 1.0]])
    m = torch.tensor([[1.0, 1.0, 0.0], [1.0, 1.0, 1.0]])
    adv, ret = core_algos.compute_remax_outcome_advantage(r, torch.tensor([0.5, 1.0]), m)
    assert torch.allclose(ret, torch.tensor([[1.0, 0.0, 0.0], [2.0, 2.0, 1.0]]))
    assert torch.allclose(adv, torch.tensor([[0.5, -0.5, 0.0], [1.0, 1.0, 0.0]]))
    with pytest.raises(ValueError, match="reward_baselines"):
        core_algos.compute_remax_outcome_advantage(r, torch.zeros(3), m)


def test_reinforce_pp_by_hand():
    r = torch.tensor([[0.0, 0.0, 1.0], [0.0, 2.0, 0.0], [1.0, 1.0, 1.0]])
    m = torch.tensor([[1.0, 1.0, 1.0], [1.0, 1.0, 0.0], [0.0, 1.0, 1.0]])
    adv, ret = core_algos.compute_reinforce_plus_plus_outcome_advantage(r, m, config={"gamma": 0.5})
    assert torch.allclose(ret, torch.tensor([[0.25, 0.5, 1.0], [1.0, 2.0, 0.0], [1.75, 1.5, 1.0]]))
    assert torch.allclose(adv, verl_F.masked_whiten(ret, m) * m)
    with pytest.raises(AssertionError, match="gamma"):
        core_algos.compute_reinforce_plus_plus_outcome_advantage(r, m)


def test_reinforce_pp_baseline_by_hand():
    r = torch.tensor([[1.0, 0.0], [3.0, 0.0]])
    m = torch.tensor([[1.0, 0.0], [1.0, 1.0]])
    adv, ret = core_algos.compute_reinforce_plus_plus_baseline_outcome_advantage(r, m, _uids("g", "g"))
    raw = torch.tensor([[-1.0, 0.0], [1.0, 1.0]])
    assert torch.allclose(adv, verl_F.masked_whiten(raw, m) * m) and adv is ret


def test_gae_by_hand():
    r, v, m = torch.tensor([[0.0, 1.0]]), torch.tensor([[0.5, 0.2]]), torch.ones(1, 2)
    adv, ret = core_algos.compute_gae_advantage_return(r, v, m, gamma=1.0, lam=1.0)
    assert torch.allclose(ret, torch.tensor([[1.0, 1.0]]))  # raw A = [.5, .8]
    assert torch.allclose(adv, torch.tensor([[-1.0, 1.0]]) / math.sqrt(2), atol=1e-5)
    _, ret = core_algos.compute_gae_advantage_return(r, v, m, gamma=0.5, lam=0.5)
    assert torch.allclose(ret, torch.tensor([[0.3, 1.0]]))  # A0 = (0 + .1 - .5) + .25 * .8


def test_gae_skips_masked_observation_tokens():
    # an observation token (mask 0) between two response tokens must not break the chain
    r, v = torch.tensor([[0.0, 9.0, 1.0]]), torch.tensor([[0.5, 7.0, 0.2]])
    m = torch.tensor([[1.0, 0.0, 1.0]])
    _, ret = core_algos.compute_gae_advantage_return(r, v, m, gamma=1.0, lam=1.0)
    assert torch.allclose(ret[0, [0, 2]], torch.tensor([1.0, 1.0]))


def test_bad_input_names_the_problem():
    r, m = torch.zeros(2, 3), torch.ones(2, 3)
    with pytest.raises(ValueError, match="shape mismatch.*response_mask"):
        core_algos.compute_grpo_outcome_advantage(r, torch.ones(2, 4), _uids("a", "b"))
    with pytest.raises(ValueError, match="index.*batch size 2"):
        core_algos.compute_rloo_outcome_advantage(r, m, _uids("a", "b", "c"))
    with pytest.raises(ValueError, match="missing group ids"):
        core_algos.compute_grpo_outcome_advantage(r, m, np.array(["a", None], dtype=object))
    with pytest.raises(ValueError, match="index is empty"):
        core_algos.compute_opo_outcome_advantage(torch.zeros(0, 3), torch.zeros(0, 3), _uids())


# ---------------------------------------------------------------- reference equality and invariants
@settings(max_examples=40, deadline=None)
@given(batch=batch_strategy, norm=st.booleans())
def test_group_estimators_match_per_sample_loops(batch, norm):
    r, m, index = _random_batch(*batch)
    adv, _ = core_algos.compute_grpo_outcome_advantage(r, m, index, norm_adv_by_std_in_grpo=norm)
    assert torch.allclose(adv, ref_grpo(r, m, index, norm), atol=1e-9)
    adv, _ = core_algos.compute_rloo_outcome_advantage(r, m, index)
    assert torch.allclose(adv, ref_rloo(r, m, index), atol=1e-9)
    adv, _ = core_algos.compute_opo_outcome_advantage(r, m, index)
    assert torch.allclose(adv, ref_opo(r, m, index), atol=1e-9)
    adv, _ = core_algos.compute_gpg_outcome_advantage(r, m, index)
    assert torch.allclose(adv, ref_gpg(r, m, index), atol=1e-9)


@settings(max_examples=40, deadline=None)
@given(batch=batch_strategy)
def test_group_advantages_sum_to_zero_within_groups(batch):
    r, m, index = _random_batch(*batch)
    ids = np.unique(index, return_inverse=True)[1]
    for norm in (True, False):
        adv, _ = core_algos.compute_grpo_outcome_advantage(r, torch.ones_like(m), index, norm_adv_by_std_in_grpo=norm)
        rloo, _ = core_algos.compute_rloo_outcome_advantage(r, torch.ones_like(m), index)
        for gid in np.unique(ids):
            rows = torch.as_tensor(ids == gid)
            if rows.sum() > 1:
                assert abs(adv[rows, 0].sum().item()) < 1e-9
                assert abs(rloo[rows, 0].sum().item()) < 1e-9


@settings(max_examples=40, deadline=None)
@given(batch=batch_strategy, gamma=st.sampled_from([1.0, 0.9, 0.5, 0.0]), prefix=st.booleans())
def test_reinforce_pp_matches_loop_for_any_mask(batch, gamma, prefix):
    r, m, _ = _random_batch(*batch, prefix_mask=prefix)
    _, ret = core_algos.compute_reinforce_plus_plus_outcome_advantage(r, m, config={"gamma": gamma})
    assert torch.allclose(ret, ref_reinforce_pp_returns(r, m, gamma), atol=1e-9)


def test_reinforce_pp_long_sequence_small_gamma_uses_stable_path():
    g = torch.Generator().manual_seed(0)
    r, m = torch.rand(3, 700, generator=g, dtype=torch.float64), torch.ones(3, 700, dtype=torch.float64)
    m[1, 300:] = 0
    _, ret = core_algos.compute_reinforce_plus_plus_outcome_advantage(r, m, config={"gamma": 0.3})
    assert torch.isfinite(ret).all()
    assert torch.allclose(ret, ref_reinforce_pp_returns(r, m, 0.3), atol=1e-9)


@settings(max_examples=40, deadline=None)
@given(batch=batch_strategy, gamma=st.sampled_from([1.0, 0.9]), lam=st.sampled_from([1.0, 0.95]))
def test_gae_matches_loop_and_ignores_masked_positions(batch, gamma, lam):
    r, m, _ = _random_batch(*batch, prefix_mask=False)
    v = torch.randn(r.shape, generator=torch.Generator().manual_seed(batch[0]), dtype=torch.float64)
    adv, ret = core_algos.compute_gae_advantage_return(r, v, m, gamma, lam)
    ref_adv, ref_ret = ref_gae(r, v, m, gamma, lam)
    assert torch.allclose(ret, ref_ret, atol=1e-9)
    assert torch.allclose(adv, verl_F.masked_whiten(ref_adv, m), atol=1e-7)
    # rewards and values at masked positions never reach the masked-in results
    poison = torch.where(m.bool(), torch.zeros_like(r), torch.full_like(r, 1e3))
    adv2, ret2 = core_algos.compute_gae_advantage_return(r + poison, v - poison, m, gamma, lam)
    keep = m.bool()
    assert torch.allclose(adv[keep], adv2[keep], atol=1e-7) and torch.allclose(ret[keep], ret2[keep], atol=1e-7)


@settings(max_examples=30, deadline=None)
@given(batch=batch_strategy)
def test_outcome_advantages_are_zero_on_padding(batch):
    r, m, index = _random_batch(*batch)
    cfg = {"gamma": 1.0, "norm_adv_by_std_in_grpo": True}
    for name in ("grpo", "rloo", "opo", "gpg", "reinforce_plus_plus_baseline", "reinforce_plus_plus"):
        fn = core_algos.get_adv_estimator_fn(name)
        adv, _ = fn(token_level_rewards=r, response_mask=m, index=index, config=cfg)
        assert torch.all(adv[m == 0] == 0), name


def test_compute_advantage_routes_grpo_through_the_registry(monkeypatch):
    """GRPO is looked up in the registry like every estimator, with the inputs its signature asks for."""
    from verl.trainer.ppo.ray_trainer import compute_advantage

    calls = []

    def recording_grpo(token_level_rewards, response_mask, index, norm_adv_by_std_in_grpo, config):
        calls.append((index.tolist(), norm_adv_by_std_in_grpo, config.gamma))
        return token_level_rewards * 2, token_level_rewards * 3

    monkeypatch.setitem(core_algos.ADV_ESTIMATOR_REGISTRY, "grpo", recording_grpo)
    rewards = torch.tensor([[0.0, 1.0], [0.0, 2.0]])
    data = DataProto.from_dict(
        {"token_level_rewards": rewards, "response_mask": torch.ones(2, 2)},
        non_tensors={"uid": np.array(["a", "a"], dtype=object)},
    )
    out = compute_advantage(data, "grpo", norm_adv_by_std_in_grpo=False, config={"gamma": 0.5})
    assert calls == [(["a", "a"], False, 0.5)]
    assert torch.equal(out.batch["advantages"], rewards * 2) and torch.equal(out.batch["returns"], rewards * 3)


def test_compute_response_mask_is_the_attention_mask_over_response_columns():
    attention = torch.tensor([[0, 1, 1, 1, 0], [1, 1, 1, 1, 1]])
    data = DataProto.from_dict({"responses": torch.zeros(2, 3, dtype=torch.long), "attention_mask": attention})
    assert core_algos.compute_response_mask(data).tolist() == [[1, 1, 0], [1, 1, 1]]


def test_apply_kl_penalty_by_hand():
    """rewards = scores - beta * kl over response tokens; the controller sees the batch mean of per-row means."""
    old = torch.tensor([[0.0, -1.0, -2.0], [0.5, 0.0, 0.0]])
    ref = torch.tensor([[-0.5, -1.0, -1.0], [0.0, -1.0, 0.0]])
    attention = torch.tensor([[1, 1, 1, 1, 0], [1, 1, 1, 1, 1]])  # prompt length 2, row 0's last token is padding
    scores = torch.tensor([[0.0, 0.0, 0.0], [0.0, 0.0, 1.0]])
    data = DataProto.from_dict(
        {
            "responses": torch.zeros(2, 3, dtype=torch.long),
            "attention_mask": attention,
            "old_log_probs": old,
            "ref_log_prob": ref,
            "token_level_scores": scores,
        }
    )
    ctrl = core_algos.FixedKLController(kl_coef=0.1)
    out, metrics = core_algos.apply_kl_penalty(data, ctrl, kl_penalty="kl")
    # kl = old - ref: row 0 -> [0.5, 0, (masked)], row 1 -> [0.5, 1.0, 0]
    expected = scores - 0.1 * torch.tensor([[0.5, 0.0, 0.0], [0.5, 1.0, 0.0]])
    assert torch.allclose(out.batch["token_level_rewards"], expected)
    assert metrics["actor/reward_kl_penalty"] == pytest.approx((0.25 + 0.5) / 2)
    assert metrics["actor/reward_kl_penalty_coeff"] == 0.1


# ---------------------------------------------------------------- KL
def test_kl_penalty_estimators_by_hand():
    logp, ref = torch.tensor([0.0]), torch.tensor([math.log(0.5)])
    d = -math.log(0.5)
    expected = {
        "kl": d,
        "k1": d,
        "abs": d,
        "mse": 0.5 * d * d,
        "k2": 0.5 * d * d,
        "low_var_kl": 0.5 + d - 1,  # exp(ref - logp) - (ref - logp) - 1
        "k3": 0.5 + d - 1,
    }
    for name, value in expected.items():
        assert core_algos.kl_penalty(logp, ref, name).item() == pytest.approx(value, rel=1e-6), name
    assert core_algos.kl_penalty(torch.tensor([0.0]), torch.tensor([1.0]), "abs").item() == 1.0
    # k3 is clamped to [-10, 10] (after clamping the log ratio to [-20, 20])
    assert core_algos.kl_penalty(torch.tensor([-50.0]), torch.tensor([0.0]), "k3").item() == 10.0


def test_kl_penalty_unknown_and_full():
    x = torch.zeros(2)
    with pytest.raises(NotImplementedError, match="full"):
        core_algos.kl_penalty(x, x, "full")
    with pytest.raises(NotImplementedError, match="'bogus'"):
        core_algos.kl_penalty(x, x, "bogus")


def test_kl_penalty_straight_through_variant():
    logp = torch.tensor([0.3, -0.2], requires_grad=True)
    ref = torch.tensor([0.0, 0.1])
    out = core_algos.kl_penalty(logp, ref, "k3+")
    assert torch.allclose(out, core_algos.kl_penalty(logp, ref, "k3"))
    out.sum().backward()
    assert torch.allclose(logp.grad, logp.detach() - ref)  # gradient of k2 = d


def test_compute_rewards_legacy():
    out = core_algos.compute_rewards(torch.tensor([1.0]), torch.tensor([0.5]), torch.tensor([0.25]), 2.0)
    assert out.item() == 0.5


def test_kl_controllers():
    fixed = core_algos.FixedKLController(0.3)
    fixed.update(100.0, 8)
    assert fixed.value == 0.3
    ada = core_algos.AdaptiveKLController(0.1, target_kl=1.0, horizon=10)
    ada.update(current_kl=2.0, n_steps=5)  # error clipped to +0.2 -> x (1 + 0.2 * 5 / 10)
    assert ada.value == pytest.approx(0.11)
    ada.update(current_kl=0.9, n_steps=10)  # error -0.1 -> x 0.9
    assert ada.value == pytest.approx(0.099)
    ctl = core_algos.get_kl_controller(OmegaConf.create({"type": "fixed", "kl_coef": 0.05}))
    assert isinstance(ctl, core_algos.FixedKLController) and ctl.value == 0.05
    cfg = {"type": "adaptive", "kl_coef": 0.2, "target_kl": 0.1, "horizon": 100}
    ctl = core_algos.get_kl_controller(cfg)
    assert isinstance(ctl, core_algos.AdaptiveKLController) and ctl.target == 0.1 and ctl.horizon == 100
    with pytest.raises(AssertionError, match="horizon"):
        core_algos.get_kl_controller({**cfg, "horizon": 0})
    with pytest.raises(NotImplementedError, match="'linear'"):
        core_algos.get_kl_controller({"type": "linear"})


# ---------------------------------------------------------------- PF-PPO
def _pf_data():
    scores = torch.tensor([[0.0, 0.0], [0.0, 1.0], [2.0, 0.0], [0.0, -0.5]])
    return DataProto.from_dict(
        tensors={"token_level_scores": scores, "row": torch.arange(4)},
        non_tensors={"uid": np.array(["a", "b", "c", "d"], dtype=object)},
        meta_info={"per_sample": [10, 11, 12, 13], "other": [1, 2], "temperature": 1.0},
    )


def test_pf_ppo_resamples_rows_consistently():
    torch.manual_seed(0)
    data = _pf_data()
    out = core_algos.compute_pf_ppo_reweight_data(data, "pow", 2.0)
    rows = out.batch["row"].tolist()
    assert len(out) == 4 and set(rows) <= {1, 2, 3}  # |0|^2 -> weight 1e-8
    assert list(out.non_tensor_batch["uid"]) == ["abcd"[r] for r in rows]
    assert out.meta_info["per_sample"] == [10 + r for r in rows]
    assert out.meta_info["other"] == [1, 2] and out.meta_info["temperature"] == 1.0
    assert data.batch["row"].tolist() == [0, 1, 2, 3]  # input untouched
    out = core_algos.compute_pf_ppo_reweight_data(data, "max_min")
    assert set(out.batch["row"].tolist()) <= {2, 3}
    torch.manual_seed(1)
    counts = np.bincount(
        np.concatenate([core_algos.compute_pf_ppo_reweight_data(data, "max_random").batch["row"] for _ in range(200)]),
        minlength=4,
    )
    assert counts[2] > 2 * counts[0]  # weight 0.4 at the max vs 0.1 elsewhere
    with pytest.raises(ValueError, match="'median'"):
        core_algos.compute_pf_ppo_reweight_data(data, "median")
