"""KL penalties and controllers, loss aggregation, policy/value/entropy losses, PF-PPO resampling."""

import math

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st
from omegaconf import OmegaConf

from verl import DataProto
from verl.trainer.ppo import core_algos


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


# ---------------------------------------------------------------- aggregation
def test_agg_loss_modes_by_hand():
    loss = torch.tensor([[1.0, 2.0, 3.0, 0.0], [4.0, 5.0, 6.0, 0.0]])
    mask = torch.tensor([[1.0, 1.0, 0.0, 0.0], [1.0, 0.0, 0.0, 0.0]])
    assert core_algos.agg_loss(loss, mask, "token-mean").item() == pytest.approx(7 / 3)
    assert core_algos.agg_loss(loss, mask, "seq-mean-token-sum").item() == pytest.approx(3.5)
    assert core_algos.agg_loss(loss, mask, "seq-mean-token-mean").item() == pytest.approx(2.75)
    assert core_algos.agg_loss(loss, mask, "seq-mean-token-sum-norm").item() == pytest.approx(7 / 4)
    with pytest.raises(ValueError, match="Invalid loss_agg_mode: 'sum'"):
        core_algos.agg_loss(loss, mask, "sum")


@settings(max_examples=40, deadline=None)
@given(seed=st.integers(0, 10_000), mode=st.sampled_from(core_algos.LOSS_AGG_MODES), junk=st.floats(-1e4, 1e4))
def test_losses_ignore_masked_tokens(seed, mode, junk):
    g = torch.Generator().manual_seed(seed)
    bs, T = 3, 5
    mask = (torch.rand(bs, T, generator=g) > 0.4).double()
    mask[:, 0] = 1  # seq-mean-token-mean divides by each row's token count

    def rnd():
        return torch.randn(bs, T, generator=g, dtype=torch.float64)

    old, new, adv, vals, rets, vpred = rnd(), rnd() * 0.3, rnd(), rnd(), rnd(), rnd()

    def poison(x):
        return torch.where(mask.bool(), x, torch.full_like(x, junk))

    a = core_algos.compute_policy_loss(old, old + new, adv, mask, 0.2, loss_agg_mode=mode)
    b = core_algos.compute_policy_loss(poison(old), poison(old + new), poison(adv), mask, 0.2, loss_agg_mode=mode)
    for x, y in zip(a, b):
        assert torch.allclose(x, y)
    a = core_algos.compute_value_loss(vpred, rets, vals, mask, 0.5, loss_agg_mode=mode)
    b = core_algos.compute_value_loss(poison(vpred), poison(rets), poison(vals), mask, 0.5, loss_agg_mode=mode)
    for x, y in zip(a, b):
        assert torch.allclose(x, y)


# ---------------------------------------------------------------- policy loss
def _lp(*ratios):
    return torch.log(torch.tensor([list(ratios)]))


def test_policy_loss_by_hand():
    old = torch.zeros(1, 4)
    adv = torch.tensor([[1.0, 1.0, -1.0, -1.0]])
    pg_loss, clipfrac, ppo_kl, lower = core_algos.compute_policy_loss(
        old, _lp(1.5, 0.5, 1.5, 0.5), adv, torch.ones(1, 4), cliprange=0.2
    )
    # per-token: max(-A*r, -A*clip(r)) = -1.2, -0.5, 1.5, 0.8 ; clipped on tokens 0 and 3
    assert pg_loss.item() == pytest.approx((-1.2 - 0.5 + 1.5 + 0.8) / 4)
    assert clipfrac.item() == pytest.approx(0.5)
    assert ppo_kl.item() == pytest.approx(-math.log(0.75) / 2, rel=1e-5)
    assert lower.item() == 0.0


def test_policy_loss_asymmetric_and_dual_clip():
    adv = torch.tensor([[1.0, -1.0, -1.0]])
    out = core_algos.compute_policy_loss(
        torch.zeros(1, 3), _lp(1.5, 0.5, 5.0), adv, torch.ones(1, 3), cliprange_low=0.1, cliprange_high=0.3
    )
    # token 0: clip at 1.3 -> -1.3 ; token 1: clip at 0.9 -> 0.9 ; token 2: 5 capped by dual clip c=3
    assert out[0].item() == pytest.approx((-1.3 + 0.9 + 3.0) / 3)
    assert out[3].item() == pytest.approx(1 / 3)
    out = core_algos.compute_policy_loss(torch.zeros(1, 3), _lp(1.5, 0.5, 5.0), adv, torch.ones(1, 3), 0.2, None, 0.3)
    assert out[0].item() == pytest.approx((-1.3 + 0.8 + 3.0) / 3)  # low falls back to cliprange
    with pytest.raises(AssertionError, match="clip_ratio_c"):
        core_algos.compute_policy_loss(torch.zeros(1, 3), _lp(1, 1, 1), adv, torch.ones(1, 3), 0.2, clip_ratio_c=1.0)
    with pytest.raises(ValueError, match="cliprange"):
        core_algos.compute_policy_loss(torch.zeros(1, 3), _lp(1, 1, 1), adv, torch.ones(1, 3))


def test_policy_loss_registry():
    assert {"vanilla", "clip_cov", "kl_cov"} <= set(core_algos.POLICY_LOSS_REGISTRY)
    with pytest.raises(ValueError, match="Unsupported loss mode: nope. Supported modes are"):
        core_algos.get_policy_loss_fn("nope")
    fn = core_algos.get_policy_loss_fn("vanilla")
    cfg = OmegaConf.create({"clip_ratio": 0.2, "clip_ratio_low": 0.1, "clip_ratio_high": 0.3, "clip_ratio_c": 3.0})
    adv = torch.tensor([[1.0, -1.0, -1.0]])
    out = fn(torch.zeros(1, 3), _lp(1.5, 0.5, 5.0), adv, torch.ones(1, 3), "token-mean", cfg)
    assert out[0].item() == pytest.approx((-1.3 + 0.9 + 3.0) / 3)


def test_kl_cov_penalises_top_covariance_token():
    logp = torch.tensor([[0.1, 0.2, 0.3, 0.4]])
    adv = torch.tensor([[1.0, 2.0, 3.0, 5.0]])  # covariance largest at token 3
    cfg = {"policy_loss": {"kl_cov_ratio": 0.25, "ppo_kl_coef": 2.0}}
    pg_loss, clipfrac, kl, _ = core_algos.get_policy_loss_fn("kl_cov")(
        torch.zeros(1, 4), logp, adv, torch.ones(1, 4), "token-mean", cfg
    )
    base = -(adv * logp.exp()).sum() / 4
    assert pg_loss.item() == pytest.approx((base + 2.0 * 0.4 / 4).item(), rel=1e-6)
    assert clipfrac.item() == 0.0 and kl.item() == pytest.approx(0.25)


def test_clip_cov_zeroes_covariance_band_token():
    logp = torch.tensor([[0.1, 0.2, 0.3, 0.4]])
    adv = torch.tensor([[1.0, 2.0, 3.0, 5.0]])  # cov = .2625, .0375, .0125, .3375
    cfg = {"clip_ratio": 0.2, "policy_loss": {"clip_cov_ratio": 0.25, "clip_cov_lb": 0.3, "clip_cov_ub": 0.35}}
    old = logp - 0.01  # ratio e^0.01: nothing is clipped by the PPO range
    pg_loss, clipfrac, _, lower = core_algos.get_policy_loss_fn("clip_cov")(
        old, logp, adv, torch.ones(1, 4), "token-mean", cfg
    )
    assert pg_loss.item() == pytest.approx(-(1 + 2 + 3) * math.exp(0.01) / 4, rel=1e-5)
    assert clipfrac.item() == pytest.approx(0.25) and lower.item() == 0.0


# ---------------------------------------------------------------- value and entropy losses
def test_value_loss_by_hand():
    one = torch.ones(1, 1)
    loss, frac = core_algos.compute_value_loss(one * 1.5, one * 2.0, one * 1.0, one, cliprange_value=0.2)
    assert loss.item() == pytest.approx(0.5 * 0.64) and frac.item() == 1.0  # clipped to 1.2
    loss, frac = core_algos.compute_value_loss(one * 1.1, one * 2.0, one * 1.0, one, cliprange_value=0.2)
    assert loss.item() == pytest.approx(0.5 * 0.81) and frac.item() == 0.0


def test_entropy_loss_by_hand():
    logits = torch.zeros(2, 3, 4)
    mask = torch.tensor([[1.0, 1.0, 0.0], [1.0, 0.0, 0.0]])
    assert core_algos.compute_entropy_loss(logits, mask).item() == pytest.approx(math.log(4), rel=1e-6)
    logits[0, 2] = 50.0  # masked token with a different entropy changes nothing
    assert core_algos.compute_entropy_loss(logits, mask, "seq-mean-token-mean").item() == pytest.approx(math.log(4))


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
