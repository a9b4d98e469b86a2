"""PRIME's formulas: the advantage (leave-one-out baselines per reward source) and the implicit-PRM losses.

The implicit process reward of a response token is ``q_t = log pi_rm(y_t | y_<t) - log pi_ref(y_t | y_<t)``; the
model's outcome estimate for the whole response is ``beta * sum_t q_t``.
"""

from __future__ import annotations

import numpy as np
import torch
import torch.nn.functional as F

import verl.utils.torch_functional as verl_F

__all__ = [
    "compute_ce_loss_rm",
    "compute_dpo_loss_rm",
    "compute_prime_advantage_return",
    "group_leave_one_out",
    "last_token_mask",
    "outcome_reward_tensor",
]


def _group_ids(index) -> torch.Tensor:
    """Dense integer group ids ``(bs,)`` from per-sample uids (any hashable values)."""
    _, inverse = np.unique(np.asarray(index, dtype=object).astype(str), return_inverse=True)
    return torch.as_tensor(inverse, dtype=torch.long)


def group_leave_one_out(rewards: torch.Tensor, mask: torch.Tensor, index) -> torch.Tensor:
    """RLOO on a token-level reward source, ``(bs, T)`` -> ``(bs, T)``.

    Each sample's value is the mean of its rewards over ``mask``; a masked token's reward ``r`` becomes
    ``(n * r - S) / (n - 1)`` where ``S`` sums the values of the ``n`` samples of its group (``index``), i.e. for a
    one-token reward, ``r`` minus the mean of the other samples. Unmasked tokens are 0. Groups need ``n >= 2``.
    """
    mask = mask.bool()
    rewards = torch.where(mask, rewards.float(), torch.zeros((), dtype=torch.float32, device=rewards.device))
    counts = mask.sum(-1).clamp(min=1)
    sample_value = rewards.sum(-1) / counts
    groups = _group_ids(index).to(rewards.device)
    num_groups = int(groups.max().item()) + 1 if len(groups) else 0
    group_sum = torch.zeros(num_groups, dtype=rewards.dtype, device=rewards.device).index_add_(0, groups, sample_value)
    group_size = torch.bincount(groups, minlength=num_groups).to(rewards.dtype)
    n = group_size[groups]
    if bool((n < 2).any()):
        raise ValueError("PRIME's leave-one-out baseline needs at least 2 responses per prompt (rollout.n >= 2)")
    shaped = (n.unsqueeze(-1) * rewards - group_sum[groups].unsqueeze(-1)) / (n.unsqueeze(-1) - 1)
    return torch.where(mask, shaped, torch.zeros_like(shaped))


def last_token_mask(response_mask: torch.Tensor) -> torch.Tensor:
    """Bool ``(bs, T)``: True at each response's last valid token (position 0 for an empty response)."""
    last = (response_mask.sum(-1).long() - 1).clamp(min=0)
    out = torch.zeros_like(response_mask, dtype=torch.bool)
    out[torch.arange(len(last), device=last.device), last] = True
    return out


def outcome_reward_tensor(acc: torch.Tensor, response_mask: torch.Tensor) -> torch.Tensor:
    """``acc`` ``(bs,)`` placed at each response's last valid token, ``(bs, T)`` float."""
    return last_token_mask(response_mask).float() * acc.float().unsqueeze(-1)


def compute_prime_advantage_return(
    rm_scores: torch.Tensor | None,
    acc: torch.Tensor | None,
    response_mask: torch.Tensor,
    index,
    reward_dpo_coef: float,
    reward_gt_coef: float,
) -> tuple[torch.Tensor, torch.Tensor]:
    """PRIME's ``(advantages, returns)``, each ``(bs, T)``.

    ``rm_scores`` ``(bs, T)``: the implicit PRM's dense rewards; ``acc`` ``(bs,)``: the verifier's outcome. Each
    source gets its own leave-one-out baseline within the prompt group (``index``: uids) and its weight
    (``reward_dpo_coef``, ``reward_gt_coef``); a source that is absent or weighted 0 is left out. ``returns`` is
    the reverse cumulative sum of the summed rewards over the response, ``advantages`` its masked whitening
    (0 on padding).
    """
    with torch.no_grad():
        mask = response_mask.bool()
        reward = torch.zeros_like(response_mask, dtype=torch.float32)
        if rm_scores is not None and reward_dpo_coef != 0:
            reward = reward + reward_dpo_coef * group_leave_one_out(rm_scores, mask, index)
        if acc is not None and reward_gt_coef != 0:
            last = last_token_mask(response_mask) & mask
            outcome = outcome_reward_tensor(acc, response_mask)
            reward = reward + reward_gt_coef * group_leave_one_out(outcome, last, index)
        masked = reward * response_mask
        returns = masked.flip(-1).cumsum(-1).flip(-1)
        # padding gets 0, not the whitened value of 0 (the loss masks it either way)
        advantages = verl_F.masked_whiten(returns, response_mask) * response_mask
    return advantages, returns


def _sequence_q(token_q: torch.Tensor, response_mask: torch.Tensor, beta: float) -> torch.Tensor:
    return beta * (token_q * response_mask).sum(-1)


def compute_ce_loss_rm(token_q: torch.Tensor, acc: torch.Tensor, response_mask: torch.Tensor, beta: float):
    """Cross-entropy loss of the implicit PRM: ``BCE(sigmoid(beta * sum_t q_t), acc)``, averaged over the batch.

    token_q: ``(bs, T)`` log-ratios (with grad); acc: ``(bs,)`` in [0, 1]; response_mask: ``(bs, T)``.
    """
    logits = _sequence_q(token_q, response_mask, beta)
    return F.binary_cross_entropy_with_logits(logits, acc.to(logits.dtype))


def compute_dpo_loss_rm(
    token_q: torch.Tensor,
    acc: torch.Tensor,
    q_group: torch.Tensor,
    acc_group: torch.Tensor,
    response_mask: torch.Tensor,
    beta: float,
):
    """Pairwise (DPO) loss of the implicit PRM against the sample's own group, averaged over the batch.

    A correct sample (``acc > 0``) is pushed above the mean detached ``beta * sum q`` of its group's samples with
    lower acc, an incorrect one below the mean of those with higher acc: ``-log sigmoid(sign * (Q - Q_other))``.
    Samples with no such opposite in their group contribute 0. token_q ``(bs, T)``; acc ``(bs,)``; q_group and
    acc_group ``(bs, n)``: ``sum_t q`` (unscaled, no grad) and acc of every sample of each sample's group.
    """
    cur = _sequence_q(token_q, response_mask, beta)
    correct = (acc > 0).unsqueeze(-1)
    opposite = torch.where(correct, acc_group < acc.unsqueeze(-1), acc_group > acc.unsqueeze(-1))
    count = opposite.sum(-1)
    other = beta * (q_group.to(cur.dtype) * opposite).sum(-1) / count.clamp(min=1)
    sign = correct.squeeze(-1).to(cur.dtype) * 2 - 1
    losses = -F.logsigmoid(sign * (cur - other.detach()))
    return (losses * (count > 0)).sum() / len(losses)
