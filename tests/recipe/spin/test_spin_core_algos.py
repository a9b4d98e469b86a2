"""SPIN's pair selection and DPO loss against values worked out by hand."""

import math

import numpy as np
import pytest
import torch

from recipe.spin.core_algos import compute_online_dpo_loss, select_preference_pairs, sequence_log_probs
from recipe.spin.spin_trainer import build_pair_batch
from verl import DataProto


def _log_sigmoid(x: float) -> float:
    return -math.log1p(math.exp(-x))


UIDS = np.array(["a", "a", "a", "b", "b", "b", "c", "c", "c"], dtype=object)
SCORES = torch.tensor([0.0, 1.0, 0.5, 0.2, 0.2, 0.2, 1.0, 0.0, 1.0])


def test_best_worst_pairs_skip_prompts_without_spread():
    # a: best row 1 (1.0), worst row 0 (0.0); b: all 0.2 -> no pair; c: tie for best -> first (6), worst 7
    assert select_preference_pairs(SCORES, UIDS, "best_worst") == [(1, 0), (6, 7)]


def test_best_vs_all_pairs_and_min_score_gap():
    # a: best 1 against 0 (gap 1.0) and 2 (gap 0.5); c: best 6 against 7 only (row 8 ties with it)
    assert select_preference_pairs(SCORES, UIDS, "best_vs_all") == [(1, 0), (1, 2), (6, 7)]
    # a gap must exceed min_score_gap: 0.5 does not exceed 0.5
    assert select_preference_pairs(SCORES, UIDS, "best_vs_all", min_score_gap=0.5) == [(1, 0), (6, 7)]
    assert select_preference_pairs(SCORES, UIDS, "best_worst", min_score_gap=1.0) == []


def test_pair_selection_groups_by_uid_not_by_position():
    uids = np.array(["x", "y", "x", "y"], dtype=object)
    assert select_preference_pairs(np.array([0.0, 3.0, 1.0, 2.0]), uids) == [(2, 0), (1, 3)]
    with pytest.raises(ValueError, match="strategy"):
        select_preference_pairs(SCORES, UIDS, "random")


def test_sequence_log_probs_sum_over_response_tokens():
    log_probs = torch.tensor([[-1.0, -2.0, -4.0], [-0.5, -0.5, -9.0]])
    mask = torch.tensor([[1, 1, 0], [1, 1, 1]])
    assert torch.equal(sequence_log_probs(log_probs, mask), torch.tensor([-3.0, -10.0]))


def test_sigmoid_dpo_loss_by_hand():
    # pair 1: (logpi_c - logref_c) - (logpi_r - logref_r) = (-3 - -4) - (-5 - -4.5) = 1 - (-0.5) = 1.5
    # pair 2: (-2 - -1) - (-2 - -2) = -1
    pc, pr = torch.tensor([-3.0, -2.0]), torch.tensor([-5.0, -2.0])
    rc, rr = torch.tensor([-4.0, -1.0]), torch.tensor([-4.5, -2.0])
    losses, logits = compute_online_dpo_loss(pc, pr, rc, rr, beta=0.1, reduction="none")
    assert torch.allclose(logits, torch.tensor([1.5, -1.0]))
    expected = [-_log_sigmoid(0.15), -_log_sigmoid(-0.1)]  # 0.62096..., 0.74439...
    assert torch.allclose(losses, torch.tensor(expected), atol=1e-6)
    mean, _ = compute_online_dpo_loss(pc, pr, rc, rr, beta=0.1)
    assert mean.item() == pytest.approx(sum(expected) / 2, abs=1e-6)
    # the loss falls as the policy prefers the chosen response more than the reference does
    assert losses[0] < math.log(2) < losses[1]


def test_label_smoothing_and_ipo_by_hand():
    one = torch.tensor([0.0])
    h = torch.tensor([2.0])  # logits = 2 with the reference terms at 0
    smooth, _ = compute_online_dpo_loss(h, one, one, one, beta=0.5, label_smoothing=0.1, reduction="none")
    assert smooth.item() == pytest.approx(-0.9 * _log_sigmoid(1.0) - 0.1 * _log_sigmoid(-1.0), abs=1e-6)
    ipo, _ = compute_online_dpo_loss(h, one, one, one, beta=0.5, loss_type="ipo", reduction="none")
    assert ipo.item() == pytest.approx((2.0 - 1.0) ** 2)  # (logits - 1 / (2 * 0.5))^2
    with pytest.raises(ValueError, match="dpo_loss_type"):
        compute_online_dpo_loss(h, one, one, one, beta=0.5, loss_type="hinge")


def test_dpo_gradient_pushes_chosen_up_and_rejected_down():
    pc, pr = torch.tensor([-3.0], requires_grad=True), torch.tensor([-3.0], requires_grad=True)
    loss, _ = compute_online_dpo_loss(pc, pr, torch.tensor([-3.0]), torch.tensor([-3.0]), beta=0.1)
    loss.backward()
    # d/dh -log sigmoid(beta h) at h = 0 is -beta / 2
    assert pc.grad.item() == pytest.approx(-0.05) and pr.grad.item() == pytest.approx(0.05)


def test_pair_batch_interleaves_and_pads_whole_pairs_per_rank():
    rows = torch.arange(9).unsqueeze(-1)
    batch = DataProto.from_dict(
        {"responses": rows, "input_ids": rows, "attention_mask": torch.ones(9, 1, dtype=torch.long)}
    )
    pairs = [(1, 0), (1, 2), (6, 7)]
    pair_batch = build_pair_batch(batch, pairs, world_size=2)
    # 3 pairs padded to 4 (a multiple of 2 ranks) by repeating the first pair with weight 0
    assert pair_batch.batch["responses"].squeeze(-1).tolist() == [1, 0, 1, 2, 6, 7, 1, 0]
    assert pair_batch.batch["dpo_weight"].tolist() == [1, 1, 1, 1, 1, 1, 0, 0]
    assert pair_batch.meta_info["num_pairs"] == 3
    # each rank's chunk starts on a chosen row
    assert [len(c) for c in pair_batch.chunk(2)] == [4, 4]
    assert len(build_pair_batch(batch, pairs, world_size=1)) == 6
