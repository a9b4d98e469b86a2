"""SPIN's algorithm pieces: preference pairs from scored samples, and the (online) DPO loss.

Pure tensor functions, no workers: the trainer picks the pairs, the actor computes the loss.
"""

from __future__ import annotations

import numpy as np
import torch
import torch.nn.functional as F

__all__ = [
    "DPO_LOSS_TYPES",
    "PAIR_STRATEGIES",
    "compute_online_dpo_loss",
    "select_preference_pairs",
    "sequence_log_probs",
]

# best_worst: one pair per prompt, its highest- against its lowest-scored response.
# best_vs_all: the highest-scored response against every response scored lower (up to n-1 pairs per prompt).
PAIR_STRATEGIES = ("best_worst", "best_vs_all")
DPO_LOSS_TYPES = ("sigmoid", "ipo")


def select_preference_pairs(
    scores: torch.Tensor | np.ndarray,
    uids: np.ndarray,
    strategy: str = "best_worst",
    min_score_gap: float = 0.0,
) -> list[tuple[int, int]]:
    """(chosen, rejected) row indices from the responses of each prompt, prompts in order of first appearance.

    scores: ``(bs,)`` sequence scores; uids: ``(bs,)`` prompt ids (the rows of one prompt share a uid). A pair
    needs ``score[chosen] - score[rejected] > min_score_gap``, so a prompt whose responses all score the same
    gives none. Ties pick the earliest row, so the result is deterministic.
    """
    if strategy not in PAIR_STRATEGIES:
        raise ValueError(f"pair selection strategy {strategy!r} is not supported; expected one of {PAIR_STRATEGIES}")
    scores = torch.as_tensor(scores, dtype=torch.float64).reshape(-1)
    if len(uids) != len(scores):
        raise ValueError(f"{len(scores)} scores but {len(uids)} uids")
    groups: dict = {}
    for row, uid in enumerate(uids):
        groups.setdefault(uid, []).append(row)
    pairs = []
    for rows in groups.values():
        group_scores = scores[rows]
        best = rows[int(torch.argmax(group_scores))]  # argmax/argmin return the first extreme
        if strategy == "best_worst":
            candidates = [rows[int(torch.argmin(group_scores))]]
        else:
            candidates = [row for row in rows if row != best]
        for rejected in candidates:
            if scores[best] - scores[rejected] > min_score_gap:
                pairs.append((best, rejected))
    return pairs


def sequence_log_probs(log_probs: torch.Tensor, response_mask: torch.Tensor) -> torch.Tensor:
    """Log-probability of each whole response: per-token ``(bs, response_length)`` summed over the mask -> ``(bs,)``."""
    return (log_probs * response_mask.to(log_probs.dtype)).sum(dim=-1)


def compute_online_dpo_loss(
    policy_chosen_logps: torch.Tensor,
    policy_rejected_logps: torch.Tensor,
    reference_chosen_logps: torch.Tensor,
    reference_rejected_logps: torch.Tensor,
    beta: float,
    loss_type: str = "sigmoid",
    label_smoothing: float = 0.0,
    reduction: str = "mean",
) -> tuple[torch.Tensor, torch.Tensor]:
    """DPO loss of preference pairs from sequence log-probs (each ``(pairs,)``); returns ``(loss, logits)``.

    ``logits = (logpi_c - logref_c) - (logpi_r - logref_r)``. ``sigmoid``: ``-log sigmoid(beta * logits)``, with
    ``label_smoothing`` eps the conservative mix ``-(1 - eps) log sigmoid(beta h) - eps log sigmoid(-beta h)``.
    ``ipo``: ``(logits - 1 / (2 beta))^2``. ``reduction``: ``mean`` over pairs or ``none`` (per pair).
    """
    if beta <= 0:
        raise ValueError(f"dpo_beta={beta!r} must be > 0")
    logits = (policy_chosen_logps - reference_chosen_logps) - (policy_rejected_logps - reference_rejected_logps)
    if loss_type == "sigmoid":
        losses = -(1.0 - label_smoothing) * F.logsigmoid(beta * logits) - label_smoothing * F.logsigmoid(-beta * logits)
    elif loss_type == "ipo":
        losses = (logits - 1.0 / (2.0 * beta)) ** 2
    else:
        raise ValueError(f"dpo_loss_type={loss_type!r} is not supported; expected one of {DPO_LOSS_TYPES}")
    if reduction == "mean":
        return losses.mean(), logits
    if reduction == "none":
        return losses, logits
    raise ValueError(f"reduction={reduction!r}; expected 'mean' or 'none'")
