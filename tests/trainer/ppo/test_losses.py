"""Losses of verl.trainer.ppo.losses: aggregation, the registered policy losses, value and entropy losses, and their
re-export from verl.trainer.ppo.core_algos (where verl users import them from)."""

import math

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st
from omegaconf import OmegaConf

from verl.trainer.ppo import core_algos, losses


# ---------------------------------------------------------------- aggregation
def test_agg_loss_modes_by_hand():
    loss = torch.tensor([[1.0, 2.0, 3.0, 0.0], [4.0, 5.0, 6.0, 0.0]])
    mask = torch.tensor([[1.0, 1.0, 0.0, 0.0], [1.0, 0.0, 0.0, 0.0]])
    assert losses.agg_loss(loss, mask, "token-mean").item() == pytest.approx(7 / 3)
    assert losses.agg_loss(loss, mask, "seq-mean-token-sum").item() == pytest.approx(3.5)
    assert losses.agg_loss(loss, mask, "seq-mean-token-mean").item() == pytest.approx(2.75)
    assert losses.agg_loss(loss, mask, "seq-mean-token-sum-norm").item() == pytest.approx(7 / 4)
    with pytest.raises(ValueError, match="Invalid loss_agg_mode: 'sum'"):
        losses.agg_loss(loss, mask, "sum")
    # loss_scale_factor replaces the response length as the divisor of seq-mean-token-sum-norm, and only there
    assert losses.agg_loss(loss, mask, "seq-mean-token-sum-norm", loss_scale_factor=10).item() == pytest.approx(0.7)
    assert losses.agg_loss(loss, mask, "token-mean", loss_scale_factor=10).item() == pytest.approx(7 / 3)


@pytest.mark.parametrize("name", ["vanilla", "clip_cov", "kl_cov", "gspo", "gpg", "geo_mean", "sapo", "cispo"])
def test_registered_losses_divide_by_the_actors_loss_scale_factor(name):
    """Each built-in loss aggregates with the actor's loss_scale_factor: seq-mean-token-sum-norm over T=3 tokens with
    a factor of 12 is the plain loss times 3 / 12."""
    torch.manual_seed(0)  # clip_cov picks its tokens at random
    (plain, *_), _ = _run(name, "seq-mean-token-sum-norm")
    torch.manual_seed(0)
    (scaled, *_), _ = _run(name, "seq-mean-token-sum-norm", cfg={**_cfg(), "loss_scale_factor": 12})
    assert scaled.item() == pytest.approx(plain.item() * 3 / 12, rel=1e-9, abs=1e-12)


def test_value_loss_takes_the_loss_scale_factor():
    vpreds, returns = torch.tensor([[1.0, 2.0]]), torch.tensor([[0.0, 0.0]])
    mask = torch.ones(1, 2)
    # 0.5 * (1 + 4) / divisor, the old values far enough that the clip does not bind
    kwargs = {"values": vpreds.clone(), "response_mask": mask, "cliprange_value": 10.0}
    loss, _ = losses.compute_value_loss(vpreds, returns, loss_agg_mode="seq-mean-token-sum-norm", **kwargs)
    assert loss.item() == pytest.approx(0.5 * 5 / 2)
    loss, _ = losses.compute_value_loss(
        vpreds, returns, loss_agg_mode="seq-mean-token-sum-norm", loss_scale_factor=5, **kwargs
    )
    assert loss.item() == pytest.approx(0.5)


@settings(max_examples=40, deadline=None)
@given(seed=st.integers(0, 10_000), mode=st.sampled_from(losses.LOSS_AGG_MODES), junk=st.floats(-1e4, 1e4))
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

    a = losses.compute_policy_loss(old, old + new, adv, mask, 0.2, loss_agg_mode=mode)
    b = losses.compute_policy_loss(poison(old), poison(old + new), poison(adv), mask, 0.2, loss_agg_mode=mode)
    for x, y in zip(a, b):
        assert torch.allclose(x, y)
    a = losses.compute_value_loss(vpred, rets, vals, mask, 0.5, loss_agg_mode=mode)
    b = losses.compute_value_loss(poison(vpred), poison(rets), poison(vals), mask, 0.5, loss_agg_mode=mode)
    for x, y in zip(a, b):
        assert torch.allclose(x, y)


# ---------------------------------------------------------------- policy loss
def _lp(*ratios):
    return torch.log(torch.tensor([list(ratios)]))


def test_policy_loss_by_hand():
    old = torch.zeros(1, 4)
    adv = torch.tensor([[1.0, 1.0, -1.0, -1.0]])
    pg_loss, clipfrac, ppo_kl, lower = losses.compute_policy_loss(
        old, _lp(1.5, 0.5, 1.5, 0.5), adv, torch.ones(1, 4), cliprange=0.2
    )
    # per-token: max(-A*r, -A*clip(r)) = -1.2, -0.5, 1.5, 0.8 ; clipped on tokens 0 and 3
    assert pg_loss.item() == pytest.approx((-1.2 - 0.5 + 1.5 + 0.8) / 4)
    assert clipfrac.item() == pytest.approx(0.5)
    assert ppo_kl.item() == pytest.approx(-math.log(0.75) / 2, rel=1e-5)
    assert lower.item() == 0.0


def test_policy_loss_asymmetric_and_dual_clip():
    adv = torch.tensor([[1.0, -1.0, -1.0]])
    out = losses.compute_policy_loss(
        torch.zeros(1, 3), _lp(1.5, 0.5, 5.0), adv, torch.ones(1, 3), cliprange_low=0.1, cliprange_high=0.3
    )
    # token 0: clip at 1.3 -> -1.3 ; token 1: clip at 0.9 -> 0.9 ; token 2: 5 capped by dual clip c=3
    assert out[0].item() == pytest.approx((-1.3 + 0.9 + 3.0) / 3)
    assert out[3].item() == pytest.approx(1 / 3)
    out = losses.compute_policy_loss(torch.zeros(1, 3), _lp(1.5, 0.5, 5.0), adv, torch.ones(1, 3), 0.2, None, 0.3)
    assert out[0].item() == pytest.approx((-1.3 + 0.8 + 3.0) / 3)  # low falls back to cliprange
    with pytest.raises(AssertionError, match="clip_ratio_c"):
        losses.compute_policy_loss(torch.zeros(1, 3), _lp(1, 1, 1), adv, torch.ones(1, 3), 0.2, clip_ratio_c=1.0)
    with pytest.raises(ValueError, match="cliprange"):
        losses.compute_policy_loss(torch.zeros(1, 3), _lp(1, 1, 1), adv, torch.ones(1, 3))


def test_policy_loss_registry():
    assert {"vanilla", "clip_cov", "kl_cov"} <= set(losses.POLICY_LOSS_REGISTRY)
    with pytest.raises(ValueError, match="Unsupported loss mode: nope. Supported modes are"):
        losses.get_policy_loss_fn("nope")
    fn = losses.get_policy_loss_fn("vanilla")
    cfg = OmegaConf.create({"clip_ratio": 0.2, "clip_ratio_low": 0.1, "clip_ratio_high": 0.3, "clip_ratio_c": 3.0})
    adv = torch.tensor([[1.0, -1.0, -1.0]])
    out = fn(torch.zeros(1, 3), _lp(1.5, 0.5, 5.0), adv, torch.ones(1, 3), "token-mean", cfg)
    assert out[0].item() == pytest.approx((-1.3 + 0.9 + 3.0) / 3)


def test_kl_cov_penalises_top_covariance_token():
    logp = torch.tensor([[0.1, 0.2, 0.3, 0.4]])
    adv = torch.tensor([[1.0, 2.0, 3.0, 5.0]])  # covariance largest at token 3
    cfg = {"policy_loss": {"kl_cov_ratio": 0.25, "ppo_kl_coef": 2.0}}
    pg_loss, clipfrac, kl, _ = losses.get_policy_loss_fn("kl_cov")(
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
    pg_loss, clipfrac, _, lower = losses.get_policy_loss_fn("clip_cov")(
        old, logp, adv, torch.ones(1, 4), "token-mean", cfg
    )
    assert pg_loss.item() == pytest.approx(-(1 + 2 + 3) * math.exp(0.01) / 4, rel=1e-5)
    assert clipfrac.item() == pytest.approx(0.25) and lower.item() == 0.0


# ---------------------------------------------------------------- value and entropy losses
def test_value_loss_by_hand():
    one = torch.ones(1, 1)
    loss, frac = losses.compute_value_loss(one * 1.5, one * 2.0, one * 1.0, one, cliprange_value=0.2)
    assert loss.item() == pytest.approx(0.5 * 0.64) and frac.item() == 1.0  # clipped to 1.2
    loss, frac = losses.compute_value_loss(one * 1.1, one * 2.0, one * 1.0, one, cliprange_value=0.2)
    assert loss.item() == pytest.approx(0.5 * 0.81) and frac.item() == 0.0


def test_entropy_loss_by_hand():
    logits = torch.zeros(2, 3, 4)
    mask = torch.tensor([[1.0, 1.0, 0.0], [1.0, 0.0, 0.0]])
    assert losses.compute_entropy_loss(logits, mask).item() == pytest.approx(math.log(4), rel=1e-6)
    logits[0, 2] = 50.0  # masked token with a different entropy changes nothing
    assert losses.compute_entropy_loss(logits, mask, "seq-mean-token-mean").item() == pytest.approx(math.log(4))


# ---------------------------------------------------------------- GSPO, GPG, GMPO (geo_mean), SAPO, CISPO
# Values and gradients worked out element by element in Python: the expected numbers are computed here with
# ``math`` on plain floats, independently of the tensor code under test.
MODES = ("token-mean", "seq-mean-token-sum", "seq-mean-token-mean", "seq-mean-token-sum-norm")
NEW_LOSSES = ("gspo", "gpg", "geo_mean", "sapo", "cispo")

# Three responses padded to T=3; the padded position carries a huge log-ratio that must change nothing.
MASK = [[1, 1, 1], [1, 1, 0], [1, 1, 1]]
OLD = [[-1.0, -0.5, -2.0], [-0.3, -1.2, -0.7], [-0.9, -1.1, -0.4]]
DELTA = [[0.3, 0.1, 0.2], [-0.4, 0.1, 7.0], [0.02, -0.01, 0.0]]  # log_prob - old_log_prob
ADV = [[1.0, 1.0, 1.0], [-0.5, -0.5, -0.5], [0.7, -1.0, 0.3]]
NEW = [[o + d for o, d in zip(ro, rd)] for ro, rd in zip(OLD, DELTA)]


def _t(rows, grad=False):
    return torch.tensor(rows, dtype=torch.float64, requires_grad=grad)


def _agg(loss, mode):
    """loss_agg_mode by hand over the python lists (``loss`` rows hold any value at padded positions)."""
    rows = [[v for v, m in zip(lr, mr) if m] for lr, mr in zip(loss, MASK)]
    if mode == "token-mean":
        return sum(map(sum, rows)) / sum(map(len, rows))
    if mode == "seq-mean-token-sum":
        return sum(sum(r) for r in rows) / len(rows)
    if mode == "seq-mean-token-mean":
        return sum(sum(r) / len(r) for r in rows) / len(rows)
    return sum(map(sum, rows)) / len(MASK[0])  # seq-mean-token-sum-norm


def _cfg(low=0.05, high=0.05, tau_pos=1.0, tau_neg=2.0):
    return {"clip_ratio_low": low, "clip_ratio_high": high, "policy_loss": {"tau_pos": tau_pos, "tau_neg": tau_neg}}


def _run(name, mode="token-mean", cfg=None, old=OLD, new=NEW, adv=ADV):
    log_prob = _t(new, grad=True)
    out = losses.get_policy_loss_fn(name)(_t(old), log_prob, _t(adv), _t(MASK), mode, cfg or _cfg())
    return out, log_prob


def _seq_mean(row, mask_row):
    vals = [v for v, m in zip(row, mask_row) if m]
    return sum(vals) / len(vals)


# ------------------------------------------------------------------------------ expected per-token losses by hand
def _gspo_tokens(low=0.05, high=0.05):
    """GSPO-token loss per token, whether its clip is active, and d loss_token / d log_prob_token."""
    loss, clipped, dloss = [], [], []
    for d_row, a_row, m_row in zip(DELTA, ADV, MASK):
        s = math.exp(_seq_mean(d_row, m_row))
        loss.append([]), clipped.append([]), dloss.append([])
        for a in a_row:
            unclipped, clip = -a * s, -a * min(max(s, 1 - low), 1 + high)
            loss[-1].append(max(unclipped, clip))
            clipped[-1].append(clip > unclipped)
            # the token's ratio has s's value and d ratio / d log_prob = s: the gradient of -a * ratio is -a * s
            dloss[-1].append(0.0 if clip > unclipped else -a * s)
    return loss, clipped, dloss


def _gmpo_sequences(low=0.1, high=0.1):
    """GMPO: per-sequence loss, and per token whether its clip is active (both bounds in log space)."""
    seq_loss, clipped = [], []
    for d_row, a_row, m_row in zip(DELTA, ADV, MASK):
        kept, flags = [], []
        for d, a in zip(d_row, a_row):
            sign = (a > 0) - (a < 0)
            c = min(max(d, -low), high)
            kept.append(sign * min(sign * d, sign * c))
            flags.append((d > high and a > 0) or (d < -low and a < 0))
        seq_loss.append(-_seq_mean(a_row, m_row) * math.exp(_seq_mean(kept, m_row)))
        clipped.append(flags)
    return seq_loss, clipped


def _sapo_tokens(tau_pos=1.0, tau_neg=2.0):
    out = []
    for d_row, a_row in zip(DELTA, ADV):
        out.append([])
        for d, a in zip(d_row, a_row):
            tau = tau_pos if a > 0 else tau_neg
            out[-1].append(-a * (4 / tau) / (1 + math.exp(-tau * (math.exp(d) - 1))))
    return out


def _cispo_weights(low=0.05, high=0.05):
    return [[min(max(math.exp(d), 1 - low), 1 + high) for d in row] for row in DELTA]


def _expected_loss(name, mode):
    if name == "gspo":
        return _agg(_gspo_tokens()[0], mode)
    if name == "gpg":
        return _agg([[-a * lp for a, lp in zip(ar, lr)] for ar, lr in zip(ADV, NEW)], mode)
    if name == "geo_mean":
        seq_loss, _ = _gmpo_sequences(0.05, 0.05)
        return _agg([[sl] * 3 for sl in seq_loss], mode)
    if name == "sapo":
        return _agg(_sapo_tokens(), mode)
    weights = _cispo_weights()
    return _agg([[-w * a * lp for w, a, lp in zip(*rows)] for rows in zip(weights, ADV, NEW)], mode)


def _masked_token_mean(flags):
    picked = [f for fr, mr in zip(flags, MASK) for f, m in zip(fr, mr) if m]
    return sum(picked) / len(picked)


# ------------------------------------------------------------------------------ tests
def test_new_losses_are_registered():
    assert set(NEW_LOSSES) <= set(losses.POLICY_LOSS_REGISTRY)
    assert losses.get_policy_loss_fn("gspo") is losses.compute_policy_loss_gspo
    assert losses.get_policy_loss_fn("geo_mean") is losses.compute_policy_loss_geo_mean


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("name", NEW_LOSSES)
def test_loss_value_by_hand_in_every_agg_mode(name, mode):
    (pg_loss, clipfrac, ppo_kl, lower), _ = _run(name, mode)
    assert pg_loss.item() == pytest.approx(_expected_loss(name, mode), rel=1e-7)  # masked_mean adds 1e-8
    assert ppo_kl.item() == pytest.approx(-_agg(DELTA, "token-mean"), rel=1e-6)  # masked mean of old - new
    assert all(x.dim() == 0 and 0.0 <= x.item() <= 1.0 for x in (clipfrac, lower))


def test_unknown_agg_mode_is_refused():
    for name in NEW_LOSSES:
        with pytest.raises(ValueError, match="loss_agg_mode"):
            _run(name, "token-sum")


def test_gspo_clip_fractions_and_per_token_gradient():
    """Sequence 0 (A > 0, s = e^0.2) is clipped above, sequence 1 (A < 0, s = e^-0.15) below, sequence 2 not:
    each token's gradient is that of its own log-prob scaled by the *sequence* ratio, -A_t * s_i."""
    (pg_loss, clipfrac, _, lower), log_prob = _run("gspo", "seq-mean-token-mean")
    _, clipped, dloss = _gspo_tokens()
    assert clipfrac.item() == pytest.approx(_masked_token_mean(clipped)) == pytest.approx(5 / 8)
    assert lower.item() == pytest.approx(2 / 8)
    pg_loss.backward()
    n = [sum(r) for r in MASK]
    expected = [[dl * m / n[i] / len(MASK) for dl, m in zip(dloss[i], MASK[i])] for i in range(len(MASK))]
    torch.testing.assert_close(log_prob.grad, _t(expected), rtol=1e-9, atol=1e-12)
    # sequence 2 is unclipped: its tokens' gradients differ only by their advantages, not by their own ratios
    s2 = math.exp(_seq_mean(DELTA[2], MASK[2]))
    assert log_prob.grad[2, 0].item() == pytest.approx(-0.7 * s2 / 3 / 3)
    assert log_prob.grad[2, 1].item() == pytest.approx(1.0 * s2 / 3 / 3)


def test_gspo_equals_the_sequence_objective_when_advantages_are_per_sequence():
    """With one advantage per sequence (GRPO) GSPO-token is GSPO: -mean_i A_i * exp(mean_t log-ratio_i)."""
    adv = [[a[0]] * 3 for a in ADV]
    wide = _cfg(low=10.0, high=10.0)  # nothing clipped: the gradient is the objective's
    (pg_loss, *_), log_prob = _run("gspo", "seq-mean-token-mean", cfg=wide, adv=adv)
    pg_loss.backward()
    lp = _t(NEW, grad=True)
    seq = [((lp[i] - _t(OLD)[i]) * _t(MASK)[i]).sum() / sum(MASK[i]) for i in range(3)]
    objective = -sum(adv[i][0] * torch.exp(seq[i]) for i in range(3)) / 3
    objective.backward()
    assert pg_loss.item() == pytest.approx(objective.item(), rel=1e-12)
    torch.testing.assert_close(log_prob.grad, lp.grad, rtol=1e-12, atol=1e-15)


def test_gpg_is_reinforce():
    (pg_loss, clipfrac, _, lower), log_prob = _run("gpg", "token-mean")
    pg_loss.backward()
    expected = [[-a * m / 8 for a, m in zip(ar, mr)] for ar, mr in zip(ADV, MASK)]
    torch.testing.assert_close(log_prob.grad, _t(expected))
    assert clipfrac.item() == 0.0 and lower.item() == 0.0


def test_geo_mean_clips_in_log_space_and_stops_gradient_of_clipped_tokens():
    cfg = _cfg(low=0.15, high=0.15)
    (pg_loss, clipfrac, _, lower), log_prob = _run("geo_mean", "seq-mean-token-mean", cfg=cfg)
    seq_loss, clipped = _gmpo_sequences(0.15, 0.15)
    assert pg_loss.item() == pytest.approx(sum(seq_loss) / 3, rel=1e-12)
    # seq 0 (A > 0): 0.3 and 0.2 above 0.15; seq 1 (A < 0): -0.4 below -0.15 (its padded 7.0 is ignored)
    assert [c for row in clipped for c in row] == [True, False, True, True, False, False, False, False, False]
    assert clipfrac.item() == pytest.approx(3 / 8) and lower.item() == pytest.approx(1 / 8)
    pg_loss.backward()
    for i, row in enumerate(clipped):
        n = sum(MASK[i])
        mean_adv = _seq_mean(ADV[i], MASK[i])
        ratio_i = -seq_loss[i] / mean_adv
        for t, is_clipped in enumerate(row):
            # d/d log_prob_t of -mean(A) * exp(mean(l)) / B: -mean(A) * ratio_i / n / B, or 0 if clipped or padded
            expected = 0.0 if is_clipped or not MASK[i][t] else -mean_adv * ratio_i / n / 3
            assert log_prob.grad[i, t].item() == pytest.approx(expected, abs=1e-12), (i, t)


def test_sapo_gate_matches_ppo_on_policy_and_fades_off_policy():
    """At ratio 1 SAPO's gradient is PPO's (-A per token); far from 1 it fades smoothly, more for larger tau."""
    (loss, *_), log_prob = _run("sapo", "token-mean", new=OLD)
    loss.backward()
    torch.testing.assert_close(log_prob.grad, _t([[-a * m / 8 for a, m in zip(ar, mr)] for ar, mr in zip(ADV, MASK)]))
    far = [[o + 2.0 for o in row] for row in OLD]  # ratio e^2 everywhere
    grads = {}
    for tau in (1.0, 3.0):
        (loss, *_), lp = _run("sapo", "token-mean", cfg=_cfg(tau_pos=tau, tau_neg=tau), new=far)
        loss.backward()
        grads[tau] = lp.grad[0, 0].item()
    # d/d lp of -A (4/tau) sigmoid(tau (r - 1)) with r = e^2: -A * 4 * s (1 - s) * r, s = sigmoid(tau (r - 1))
    for tau, g in grads.items():
        s = 1 / (1 + math.exp(-tau * (math.exp(2.0) - 1)))
        assert g == pytest.approx(-1.0 * 4 * s * (1 - s) * math.exp(2.0) / 8, rel=1e-7)
    # PPO's unclipped gradient there would be -A * r / 8 = -e^2 / 8; the gate shrinks it, faster for larger tau
    assert abs(grads[3.0]) < abs(grads[1.0]) < math.exp(2.0) / 8


def test_sapo_refuses_a_non_positive_temperature():
    with pytest.raises(ValueError, match=r"actor\.tau_neg=0\.0"):
        _run("sapo", cfg=_cfg(tau_neg=0.0))


def test_cispo_keeps_the_gradient_of_clipped_tokens():
    """Token (0, 0) has ratio e^0.3 > 1.05 with A > 0: PPO's clip drops its gradient, CISPO keeps it, scaled by
    the clipped (detached) weight 1.05."""
    (loss, clipfrac, _, lower), log_prob = _run("cispo", "token-mean")
    loss.backward()
    weights = _cispo_weights()
    expected = [[-w * a * m / 8 for w, a, m in zip(*rows)] for rows in zip(weights, ADV, MASK)]
    torch.testing.assert_close(log_prob.grad, _t(expected))
    assert log_prob.grad[0, 0].item() == pytest.approx(-1.05 / 8)
    # weights clipped: seq 0 (e^.3, e^.1, e^.2) and seq 1 token 1 (e^.1) above, seq 1 token 0 (e^-.4) below
    assert clipfrac.item() == pytest.approx(5 / 8) and lower.item() == pytest.approx(1 / 8)

    vanilla_lp = _t(NEW, grad=True)
    cfg = {"clip_ratio": 0.05, "clip_ratio_low": 0.05, "clip_ratio_high": 0.05}
    losses.get_policy_loss_fn("vanilla")(_t(OLD), vanilla_lp, _t(ADV), _t(MASK), "token-mean", cfg)[0].backward()
    assert vanilla_lp.grad[0, 0].item() == 0.0


def test_losses_accept_the_composed_actor_config():
    """The registry contract: config is the actor section (typed, a dict or a DictConfig) with the YAML defaults."""
    from omegaconf import OmegaConf

    cfg = OmegaConf.create({"clip_ratio": 0.2, "clip_ratio_low": 0.2, "clip_ratio_high": 0.28})
    for name in NEW_LOSSES:
        out, _ = _run(name, cfg=cfg)
        assert len(out) == 4 and all(torch.isfinite(x) for x in out)


# ---------------------------------------------------------------- core_algos re-export
def test_core_algos_reexports_every_public_loss_name():
    """verl users import the losses from core_algos: each public name there is the very object in losses."""
    names = [n for n in vars(losses) if not n.startswith("_") and (n.startswith(("compute_", "get_", "register_")))]
    names += ["agg_loss", "POLICY_LOSS_REGISTRY", "LOSS_AGG_MODES"]
    assert {"compute_policy_loss", "compute_value_loss", "compute_entropy_loss", "compute_policy_loss_gspo"} <= set(
        names
    )
    for name in names:
        assert getattr(core_algos, name) is getattr(losses, name), name
