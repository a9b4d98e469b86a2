"""Rollout correction (``algorithm.rollout_correction``): IS weights, rejection masks and metrics against values
worked out by hand, the identity case (equal log-probs: weights exactly 1, loss unchanged), the actor's bypass
path, and the config check's refusals."""

import inspect
import math

import pytest
import torch

from verl.trainer.ppo.losses import POLICY_LOSS_REGISTRY, agg_loss, compute_policy_loss, get_policy_loss_fn
from verl.trainer.ppo.rollout_corr_helper import (
    compute_offpolicy_metrics,
    compute_rollout_correction_and_rejection_mask,
    correction_enabled,
    parse_is_threshold,
    parse_rs_spec,
    parse_veto_threshold,
    rejection_enabled,
    rollout_correction,
    rollout_correction_kwargs,
)
from verl.workers.actor.ppo_actor import PPOActor

LN2, LN4 = math.log(2.0), math.log(4.0)
# two responses; row 1's last column is padding (its log-ratio is garbage on purpose: it must be ignored)
MASK = torch.tensor([[1, 1, 1], [1, 1, 0]])
LOG_RATIO = torch.tensor([[LN2, -LN2, 0.0], [LN4, 0.0, 7.0]])  # ratios pi_old / pi_rollout: [2, .5, 1], [4, 1, -]
ROLLOUT = torch.tensor([[-1.0, -2.0, -0.5], [-3.0, -0.1, -1.0]])
OLD = ROLLOUT + LOG_RATIO


def correct(**kwargs):
    return rollout_correction(OLD, ROLLOUT, MASK, **kwargs)


def assert_close(actual, expected):
    torch.testing.assert_close(actual.float(), torch.tensor(expected, dtype=torch.float32), rtol=1e-6, atol=1e-6)


# ---------------------------------------------------------------------------------------------- IS weights
def test_token_truncated_is():
    weights, mask, metrics = correct(rollout_is="token", rollout_is_threshold=2.0)
    assert_close(weights, [[2.0, 0.5, 1.0], [2.0, 1.0, 0.0]])  # 4 truncated to 2; padding 0
    assert torch.equal(mask, MASK)  # no rejection without rollout_rs
    assert metrics["rollout_corr/rollout_is_mean"] == pytest.approx(6.5 / 5)
    assert metrics["rollout_corr/rollout_is_max"] == pytest.approx(4.0)  # before truncation
    assert metrics["rollout_corr/rollout_is_min"] == pytest.approx(0.5)
    assert metrics["rollout_corr/rollout_is_ratio_fraction_high"] == pytest.approx(1 / 5)
    assert metrics["rollout_corr/rollout_is_ratio_fraction_low"] == pytest.approx(0.0)  # 0.5 is not < 1/2


def test_sequence_truncated_is():
    weights, _, metrics = correct(rollout_is="sequence", rollout_is_threshold=2.0)
    # products: row 0 = 2 * .5 * 1 = 1, row 1 = 4 (truncated to 2), broadcast over each response
    assert_close(weights, [[1.0, 1.0, 1.0], [2.0, 2.0, 0.0]])
    assert metrics["rollout_corr/rollout_is_seq_max"] == pytest.approx(4.0)
    assert metrics["rollout_corr/rollout_is_seq_mean"] == pytest.approx(1.5)
    assert metrics["rollout_corr/rollout_is_seq_max_deviation"] == pytest.approx(3.0)
    assert metrics["rollout_corr/rollout_is_seq_fraction_high"] == pytest.approx(0.5)


def test_masked_is_icepop_zeroes_weights_outside_bounds():
    weights, mask, _ = correct(rollout_is="token", rollout_is_threshold="0.6_3.0")
    assert_close(weights, [[2.0, 0.0, 1.0], [0.0, 1.0, 0.0]])  # 0.5 and 4 are out of [0.6, 3]
    assert torch.equal(mask, MASK)


def test_batch_normalized_weights_have_mean_one():
    weights, _, _ = correct(rollout_is="token", rollout_is_threshold=2.0, rollout_is_batch_normalize=True)
    assert_close(weights, [[2.0 / 1.3, 0.5 / 1.3, 1.0 / 1.3], [2.0 / 1.3, 1.0 / 1.3, 0.0]])
    assert weights[MASK.bool()].mean().item() == pytest.approx(1.0)


def test_effective_sample_size():
    _, _, metrics = correct(rollout_is="token", rollout_is_threshold=2.0)
    w = torch.tensor([2.0, 0.5, 1.0, 2.0, 1.0])
    assert metrics["rollout_corr/rollout_is_eff_sample_size"] == pytest.approx(1 / ((w / w.mean()) ** 2).mean().item())


def test_verls_call_returns_the_weights_in_a_data_proto():
    proto, mask, metrics = compute_rollout_correction_and_rejection_mask(
        old_log_prob=OLD, rollout_log_prob=ROLLOUT, response_mask=MASK, rollout_is="token", rollout_is_threshold=2.0
    )
    assert_close(proto.batch["rollout_is_weights"], [[2.0, 0.5, 1.0], [2.0, 1.0, 0.0]])
    assert torch.equal(mask, MASK) and "rollout_corr/kl" in metrics
    assert compute_rollout_correction_and_rejection_mask(OLD, ROLLOUT, MASK)[0] is None  # rollout_is null


# ---------------------------------------------------------------------------------------------- rejection
@pytest.mark.parametrize(
    "rs, threshold, keep",
    [
        ("token_k1", "0.6_3.0", [[1, 0, 1], [0, 1, 0]]),
        ("token", "0.6_3.0", [[1, 0, 1], [0, 1, 0]]),  # verl 0.6's name
        ("seq_sum_k1", 2.0, [[1, 1, 1], [0, 0, 0]]),  # bounds [1/2, 2]: products 1 (kept) and 4
        ("sequence", 2.0, [[1, 1, 1], [0, 0, 0]]),
        ("seq_mean_k1", "0.9_1.5", [[1, 1, 1], [0, 0, 0]]),  # geometric means 1 and sqrt(4) = 2
        ("geometric", "0.9_1.5", [[1, 1, 1], [0, 0, 0]]),
        ("token_k2", 0.2, [[0, 0, 1], [0, 1, 0]]),  # .5 ln(2)^2 = .240, .5 ln(4)^2 = .961
        ("token_k3", 0.2, [[0, 1, 1], [0, 1, 0]]),  # r - 1 - ln r: .307, .193, 0 | 1.614, 0
        ("seq_max_k3", 0.5, [[1, 1, 1], [0, 0, 0]]),  # maxima .307 and 1.614
        ("seq_mean_k2", 0.2, [[1, 1, 1], [0, 0, 0]]),  # means .160 and .480
        ("seq_sum_k3", 0.6, [[1, 1, 1], [0, 0, 0]]),  # sums .500 and 1.614
        ("token_k1,seq_sum_k1", "0.6_3.0,2.0", [[1, 0, 1], [0, 0, 0]]),  # every rule must keep a token
    ],
)
def test_rejection_masks(rs, threshold, keep):
    weights, mask, metrics = correct(rollout_rs=rs, rollout_rs_threshold=threshold)
    assert weights is None  # rejection only
    expected = torch.tensor(keep) * MASK
    assert torch.equal(mask, expected)
    rejected = (MASK - expected).sum().item()
    assert metrics["rollout_corr/rollout_rs_masked_fraction"] == pytest.approx(rejected / 5)
    rows_hit = ((MASK - expected).sum(-1) > 0).float().mean().item()
    assert metrics["rollout_corr/rollout_rs_seq_masked_fraction"] == pytest.approx(rows_hit)


def test_is_and_rejection_together():
    weights, mask, _ = correct(
        rollout_is="token", rollout_is_threshold=2.0, rollout_rs="token_k1", rollout_rs_threshold=3.0
    )
    assert_close(weights, [[2.0, 0.5, 1.0], [2.0, 1.0, 0.0]])  # weights are not masked by the rejection
    assert torch.equal(mask, torch.tensor([[1, 1, 1], [0, 1, 0]]))  # [1/3, 3]: only the ratio 4 goes


# ---------------------------------------------------------------------------------------------- verl 0.7.0's keys
@pytest.mark.parametrize(
    "rs, upper, lower, keep",
    [
        ("token", 3.0, 0.6, [[1, 0, 1], [0, 1, 0]]),  # ratios in [0.6, 3]: .5 and 4 go
        ("token_k1", 3.0, 0.4, [[1, 1, 1], [0, 1, 0]]),  # [0.4, 3] keeps .5
        ("sequence", 5.0, 1.5, [[0, 0, 0], [1, 1, 0]]),  # products 1 (< 1.5) and 4
        ("geometric", 2.5, 1.5, [[0, 0, 0], [1, 1, 0]]),  # geometric means 1 and 2
        ("token", 3.0, None, [[1, 1, 1], [0, 1, 0]]),  # null lower: 1/3, so .5 stays
        ("token_k1,seq_max_k3", "3.0,0.5", 0.6, [[1, 0, 1], [0, 0, 0]]),  # the lower bound is the k1 option's
    ],
)
def test_verl_070_lower_threshold_bounds_the_ratio_from_below(rs, upper, lower, keep):
    _, mask, metrics = correct(rollout_rs=rs, rollout_rs_threshold=upper, rollout_rs_threshold_lower=lower)
    expected = torch.tensor(keep) * MASK
    assert torch.equal(mask, expected)
    assert metrics["rollout_corr/rollout_rs_masked_fraction"] == pytest.approx((MASK - expected).sum().item() / 5)


def test_verl_070_lower_threshold_is_verl_071s_lower_upper_spelling():
    rules = parse_rs_spec("geometric", 1.001, 0.998)
    assert rules == parse_rs_spec("seq_mean_k1", "0.998_1.001")
    assert [(r.option, r.lower, r.upper) for r in rules] == [("seq_mean_k1", 0.998, 1.001)]
    # with an explicit lower bound a single upper bound may be <= 1 (verl 0.7.0 allowed it)
    assert [(r.lower, r.upper) for r in parse_rs_spec("token", 0.9, 0.5)] == [(0.5, 0.9)]


@pytest.mark.parametrize(
    "rs, threshold, lower, message",
    [
        ("token_k3", 0.01, 0.5, "has no k1 option"),
        ("token_k1", "0.5_2.0", 0.4, "two lower bounds"),
        ("token_k1", 2.0, 2.0, "needs lower < upper"),
        ("token_k1", 2.0, -0.1, "number >= 0"),
        ("token_k1", 2.0, "low", "number >= 0"),
    ],
)
def test_bad_verl_070_lower_thresholds_are_refused(rs, threshold, lower, message):
    with pytest.raises(ValueError, match=message) as exc:
        parse_rs_spec(rs, threshold, lower)
    assert "rollout_rs_threshold_lower" in str(exc.value)


def test_token_veto_drops_whole_sequences_with_a_ratio_below_it():
    weights, mask, metrics = correct(rollout_is="token", rollout_token_veto_threshold=0.6)
    # row 0 holds the ratio 0.5 < 0.6: all of it goes; row 1 (ratios 4 and 1) stays
    assert torch.equal(mask, torch.tensor([[0, 0, 0], [1, 1, 0]]))
    assert_close(weights, [[2.0, 0.5, 1.0], [2.0, 1.0, 0.0]])  # the IS weights are not vetoed
    assert metrics["rollout_corr/rollout_is_veto_fraction"] == pytest.approx(1 / 2)
    assert metrics["rollout_corr/rollout_is_catastrophic_token_fraction"] == pytest.approx(1 / 5)
    assert "rollout_corr/rollout_rs_masked_fraction" not in metrics  # no rollout_rs: the veto is its own rule


def test_token_veto_adds_to_rejection_and_reads_unclamped_ratios():
    _, mask, metrics = correct(rollout_rs="token_k1", rollout_rs_threshold="0.4_3.0", rollout_token_veto_threshold=0.6)
    assert torch.equal(mask, torch.tensor([[0, 0, 0], [0, 1, 0]]))  # token_k1 takes the 4, the veto row 0
    assert metrics["rollout_corr/rollout_rs_masked_fraction"] == pytest.approx(1 / 5)  # the rejection's share alone
    assert metrics["rollout_corr/rollout_is_veto_fraction"] == pytest.approx(1 / 2)
    # a ratio e^-30 lies beyond the e^-20 safety bound; the veto at 1e-10 (= e^-23) still sees it; padding is ignored
    log_ratio = torch.tensor([[-30.0, 0.0, 0.0], [0.0, 0.0, -50.0]])
    _, mask, _ = rollout_correction(ROLLOUT + log_ratio, ROLLOUT, MASK, rollout_token_veto_threshold=1e-10)
    assert torch.equal(mask, torch.tensor([[0, 0, 0], [1, 1, 0]]))


@pytest.mark.parametrize("bad", [0, -1e-4, "often", True, float("inf")])
def test_bad_veto_thresholds_are_refused(bad):
    with pytest.raises(ValueError, match="rollout_token_veto_threshold"):
        parse_veto_threshold(bad)
    with pytest.raises(ValueError, match="rollout_token_veto_threshold"):
        correct(rollout_token_veto_threshold=bad)


def test_the_veto_alone_switches_the_correction_on():
    corr = {"rollout_is": None, "rollout_rs": None, "rollout_token_veto_threshold": 1e-4}
    assert rejection_enabled(corr) and correction_enabled(corr)
    assert not rejection_enabled({**corr, "rollout_token_veto_threshold": None})
    kwargs = rollout_correction_kwargs({**corr, "rollout_rs": "token", "rollout_rs_threshold_lower": 0.3})
    assert (kwargs["rollout_token_veto_threshold"], kwargs["rollout_rs_threshold_lower"]) == (1e-4, 0.3)


def test_the_trainer_applies_the_veto_to_the_batch_without_rollout_rs():
    from types import SimpleNamespace

    from verl import DataProto
    from verl.trainer.config.algorithm import RolloutCorrectionConfig
    from verl.trainer.ppo.ray_trainer import RayPPOTrainer

    correction = RolloutCorrectionConfig(rollout_token_veto_threshold=0.6)
    trainer = SimpleNamespace(
        ppo_config=SimpleNamespace(algorithm=SimpleNamespace(rollout_correction=correction)),
        _rollout_compared_mask=lambda batch: batch.batch["response_mask"],
    )
    batch = DataProto.from_dict(
        tensors={"response_mask": MASK.clone(), "old_log_probs": OLD, "rollout_log_probs": ROLLOUT}
    )
    metrics = {}
    batch = RayPPOTrainer._apply_rollout_correction(trainer, batch, metrics)
    assert torch.equal(batch.batch["response_mask"], torch.tensor([[0, 0, 0], [1, 1, 0]]))
    assert "rollout_is_weights" not in batch.batch.keys()
    assert metrics["rollout_corr/rollout_is_veto_fraction"] == pytest.approx(1 / 2)


# ---------------------------------------------------------------------------------------------- metrics
def test_mismatch_metrics():
    m = compute_offpolicy_metrics(OLD, ROLLOUT, MASK)
    r = torch.tensor([2.0, 0.5, 1.0, 4.0, 1.0])
    assert m["rollout_corr/kl"] == pytest.approx(-LN4 / 5)
    assert m["rollout_corr/k3_kl"] == pytest.approx((r - 1 - r.log()).mean().item())
    assert m["rollout_corr/chi2_token"] == pytest.approx((r**2).mean().item() - 1)
    assert m["rollout_corr/chi2_seq"] == pytest.approx((1.0 + 16.0) / 2 - 1)
    train_lppl = torch.tensor([-OLD[0].mean().item(), -OLD[1, :2].mean().item()])
    roll_lppl = torch.tensor([-ROLLOUT[0].mean().item(), -ROLLOUT[1, :2].mean().item()])
    assert m["rollout_corr/log_ppl_diff"] == pytest.approx((roll_lppl - train_lppl).mean().item(), rel=1e-5)
    assert m["rollout_corr/training_ppl"] == pytest.approx(train_lppl.exp().mean().item(), rel=1e-5)
    assert m["rollout_corr/rollout_ppl"] == pytest.approx(roll_lppl.exp().mean().item(), rel=1e-5)


# ---------------------------------------------------------------------------------------------- identity
@pytest.mark.parametrize("rollout_is", ["token", "sequence"])
def test_equal_log_probs_give_weights_exactly_one(rollout_is):
    weights, mask, metrics = rollout_correction(
        ROLLOUT,
        ROLLOUT.clone(),
        MASK,
        rollout_is=rollout_is,
        rollout_rs="token_k1,seq_mean_k1",
        rollout_rs_threshold=1.5,
    )
    assert torch.equal(weights, MASK.float())  # exactly 1 on every response token, 0 on padding
    assert torch.equal(mask, MASK)
    assert metrics["rollout_corr/kl"] == 0.0 and metrics["rollout_corr/k3_kl"] == 0.0
    assert metrics["rollout_corr/rollout_rs_masked_fraction"] == 0.0


# the losses this package registers; a recipe's loss (sppo, registered when its module is imported) that takes no
# rollout_is_weights is refused by the config check when IS weights are on, so it is not held to this
BUILT_IN_LOSSES = sorted(
    name for name, fn in POLICY_LOSS_REGISTRY.items() if fn.__module__ == "verl.trainer.ppo.losses"
)


def test_every_built_in_policy_loss_takes_rollout_is_weights():
    assert BUILT_IN_LOSSES and all(
        "rollout_is_weights" in inspect.signature(POLICY_LOSS_REGISTRY[name]).parameters for name in BUILT_IN_LOSSES
    )


@pytest.mark.parametrize("loss_mode", BUILT_IN_LOSSES)
def test_unit_weights_leave_every_policy_loss_unchanged(loss_mode):
    torch.manual_seed(0)
    old = torch.randn(4, 6) - 2
    log_prob = (old + 0.3 * torch.randn(4, 6)).requires_grad_()
    adv, mask = torch.randn(4, 6), (torch.rand(4, 6) > 0.2).long()
    weights, _, _ = rollout_correction(old, old.clone(), mask, rollout_is="token")
    fn = get_policy_loss_fn(loss_mode)
    torch.manual_seed(1)  # clip_cov picks tokens at random
    plain = fn(old, log_prob, adv, mask, "token-mean", None)
    torch.manual_seed(1)
    corrected = fn(old, log_prob, adv, mask, "token-mean", None, rollout_is_weights=weights)
    for a, b in zip(plain, corrected):
        assert torch.equal(a, b)


def test_weights_multiply_the_per_token_loss():
    old = torch.zeros(1, 2)
    log_prob, adv, mask = torch.zeros(1, 2), torch.tensor([[1.0, -1.0]]), torch.ones(1, 2)
    w = torch.tensor([[2.0, 0.5]])
    loss, *_ = compute_policy_loss(old, log_prob, adv, mask, cliprange=0.2, rollout_is_weights=w)
    # ratio 1: per-token losses -A = [-1, 1], weighted [-2, .5], token mean -0.75
    assert loss.item() == pytest.approx(-0.75)


@pytest.mark.parametrize("mode", ["token-mean", "seq-mean-token-sum", "seq-mean-token-mean", "seq-mean-token-sum-norm"])
def test_a_wholly_rejected_sequence_keeps_every_aggregation_finite(mode):
    loss_mat = torch.tensor([[1.0, 3.0, 5.0], [7.0, 9.0, 0.0]])
    _, kept, _ = rollout_correction(OLD, ROLLOUT, MASK, rollout_rs="seq_sum_k1", rollout_rs_threshold=2.0)
    assert kept[1].sum() == 0  # row 1 (product 4) rejected
    expected = {"token-mean": 3.0, "seq-mean-token-sum": 9.0 / 2, "seq-mean-token-mean": 3.0 / 2}
    expected["seq-mean-token-sum-norm"] = 9.0 / 3
    assert agg_loss(loss_mat, kept, mode).item() == pytest.approx(expected[mode])


# ---------------------------------------------------------------------------------------------- bypass (actor)
def test_bypass_ppo_clip_applies_rejection_only_and_reinforce_the_weights():
    log_prob = OLD.clone().requires_grad_()  # pi_theta; the rollout's log-probs stand in as the old ones
    corr = {"rollout_is": "token", "rollout_is_threshold": 2.0, "rollout_rs": "token_k1", "rollout_rs_threshold": 3.0}
    mask, kwargs, metrics = PPOActor._bypass_weights({**corr, "loss_type": "ppo_clip"}, log_prob, ROLLOUT, MASK)
    assert kwargs == {}  # the PPO ratio pi_theta / pi_rollout is the IS correction
    assert torch.equal(mask, torch.tensor([[1, 1, 1], [0, 1, 0]]))
    assert metrics["rollout_corr/rollout_is_max"] == pytest.approx(4.0)
    mask, kwargs, _ = PPOActor._bypass_weights({**corr, "loss_type": "reinforce"}, log_prob, ROLLOUT, MASK)
    assert_close(kwargs["rollout_is_weights"], [[2.0, 0.5, 1.0], [2.0, 1.0, 0.0]])
    assert not kwargs["rollout_is_weights"].requires_grad
    # verl 0.7.0's keys reach the actor through the same settings: the veto drops row 0 (ratio 0.5 < 0.6)
    veto = {**corr, "loss_type": "ppo_clip", "rollout_rs": "token", "rollout_token_veto_threshold": 0.6}
    mask, _, _ = PPOActor._bypass_weights(veto, log_prob, ROLLOUT, MASK)
    assert torch.equal(mask, torch.tensor([[0, 0, 0], [0, 1, 0]]))


# ---------------------------------------------------------------------------------------------- parsing
@pytest.mark.parametrize(
    "rs, threshold, message",
    [
        ("token_k4", 2.0, "unknown option"),
        ("token_k1", None, "needs"),
        ("token_k1", 0.5, "must be > 1"),
        ("token_k1", "2.0_0.5", "lower < upper"),
        ("token_k2", "0.1_0.2", "one upper bound"),
        ("token_k1,seq_sum_k1", "1.5,2.0,3.0", "3 entries for 2 options"),
    ],
)
def test_bad_rejection_specs_are_refused(rs, threshold, message):
    with pytest.raises(ValueError, match=message):
        parse_rs_spec(rs, threshold)


def test_thresholds_parse():
    assert parse_is_threshold(2.0) == (None, 2.0)
    assert parse_is_threshold("0.5_5.0") == (0.5, 5.0)
    with pytest.raises(ValueError, match="> 0"):
        parse_is_threshold(0)
    rules = parse_rs_spec("token_k1,seq_max_k3", "2.0,0.01")
    assert [(r.option, r.lower, r.upper) for r in rules] == [("token_k1", 0.5, 2.0), ("seq_max_k3", None, 0.01)]
    # a repeated option (an alias included) counts once, so one threshold entry matches it
    assert [r.option for r in parse_rs_spec("token,token_k1, seq_max_k3", "2.0,0.01")] == ["token_k1", "seq_max_k3"]
    with pytest.raises(ValueError, match="2 entries for 1 options"):
        parse_rs_spec("token_k1,token_k1", "0.5_2.0,0.6_3.0")


def test_token_version_metrics_count_sampled_tokens_only():
    from verl.trainer.ppo.rollout_corr_helper import compute_token_version_metrics

    # row 0: versions 3,3,4 then padding; row 1: a tool token (-1) between two version-4 tokens; row 2: none sampled
    versions = torch.tensor([[3, 3, 4, -1], [4, -1, 4, 4], [-1, -1, -1, -1]])
    mask = torch.tensor([[1, 1, 1, 0], [1, 0, 1, 0], [0, 0, 0, 0]])
    metrics = compute_token_version_metrics(versions, actor_version=5, response_mask=mask)
    # staleness of the 5 sampled tokens: 2, 2, 1, 1, 1
    assert metrics["rollout_corr/token_staleness_mean"] == pytest.approx(7 / 5)
    assert metrics["rollout_corr/token_staleness_max"] == 2
    assert metrics["rollout_corr/token_version_min"] == 3
    assert metrics["rollout_corr/mixed_version_seq_fraction"] == pytest.approx(1 / 2)  # row 0 of the 2 with tokens
    assert compute_token_version_metrics(versions[2:], 5, mask[2:]) == {}
