"""SPPO (Self-Play Preference Optimization) as squared-loss regression: the advantage step and the policy loss.

The advantage step replaces an estimator: each response's score ``s_i`` (its summed token rewards) is centred by a
soft mean over the *whole batch*, ``seq_level_rewards = s - SoftMean_beta(s)``. The actor then regresses the
sequence log-ratio against ``eta`` times that reward, per sequence:
``(sum_t m*log pi - sum_t m*log pi_old - eta * seq_level_reward)^2``.

The loss is registered as ``actor.policy_loss.loss_mode=sppo``, so the stock actor runs it. The sequence reward
reaches it through the ``advantages`` tensor (the only per-sample signal the actor forwards to a loss): the
trainer writes it on every response token of its row (see :func:`sppo_advantages`).
"""

from __future__ import annotations

import math
from typing import Any

import torch

import verl.utils.torch_functional as verl_F
from verl.trainer.ppo.losses import register_policy_loss

__all__ = ["SPPO_LOSS_MODE", "compute_sppo_loss", "compute_sppo_policy_loss", "seq_level_rewards", "softmean"]

SPPO_LOSS_MODE = "sppo"


def softmean(x: torch.Tensor, beta: float, dim: int = -1, keepdim: bool = False) -> torch.Tensor:
    """``(1/beta) * log(mean(exp(beta * x)))`` along ``dim``; the arithmetic mean when ``beta == 0``.

    As ``beta -> 0`` it tends to the mean, as ``beta -> +inf`` to the max. Computed as the mean plus a
    ``logsumexp`` of the centred values, in float64: large ``beta * x`` cannot overflow, and a small ``beta`` does
    not divide float32 rounding noise by ``beta``.
    """
    if beta == 0:
        return x.mean(dim=dim, keepdim=keepdim)
    x64 = x.double()
    mean = x64.mean(dim=dim, keepdim=True)
    lse = torch.logsumexp((x64 - mean) * beta, dim=dim, keepdim=True)
    out = mean + (lse - math.log(x.shape[dim])) / beta
    return (out if keepdim else out.squeeze(dim)).to(x.dtype)


def seq_level_rewards(token_level_rewards: torch.Tensor, beta: float) -> torch.Tensor:
    """SPPO's centred sequence reward ``s - SoftMean_beta(s)``, ``s = token_level_rewards.sum(-1)``.

    token_level_rewards: ``(bs, response_length)``; returns ``(bs,)``. The soft mean is over the whole batch
    (every response to every prompt), as SPPO defines it, not per prompt group.
    """
    scores = token_level_rewards.sum(dim=-1)
    return scores - softmean(scores, beta, dim=0)


def sppo_advantages(rewards: torch.Tensor, response_mask: torch.Tensor) -> torch.Tensor:
    """The ``(bs,)`` sequence rewards written on each row's response tokens, ``(bs, response_length)``.

    This is how the reward travels to the loss through the actor's ``advantages`` slot; it also makes the
    trainer's ``critic/advantages/*`` metrics the statistics of the sequence rewards.
    """
    return rewards.unsqueeze(-1) * response_mask.to(rewards.dtype)


def compute_sppo_loss(
    old_log_prob: torch.Tensor,
    log_prob: torch.Tensor,
    rewards: torch.Tensor,
    response_mask: torch.Tensor,
    eta: float = 1.0,
    loss_agg_mode: str = "token-mean",
) -> tuple[torch.Tensor, torch.Tensor]:
    """SPPO loss: the mean over sequences of ``(sum_t m*(log pi - log pi_old) - eta * reward)^2``.

    old_log_prob, log_prob, response_mask: ``(bs, response_length)``; rewards ``(bs,)``. Only sequences with at
    least one response token count (``token-mean``, the one mode SPPO defines; a sequence without response tokens
    has nothing to regress). Returns ``(loss, log_ratio (bs,))``, the summed per-sequence log-ratios.
    """
    if loss_agg_mode != "token-mean":
        raise ValueError(f"SPPO loss: loss_agg_mode={loss_agg_mode!r} is not supported; expected 'token-mean'")
    mask = response_mask.to(log_prob.dtype)
    log_ratio = ((log_prob - old_log_prob) * mask).sum(dim=-1)
    loss_vec = (log_ratio - eta * rewards) ** 2
    has_tokens = (mask.sum(dim=-1) > 0).to(loss_vec.dtype)
    return verl_F.masked_mean(loss_vec, has_tokens), log_ratio


def _rewards_from_advantages(advantages: torch.Tensor, response_mask: torch.Tensor) -> torch.Tensor:
    """Each row's sequence reward, read at its first response token (rows without one get an unused value)."""
    first = response_mask.to(torch.float32).argmax(dim=-1, keepdim=True)  # argmax returns the first maximum
    return advantages.gather(-1, first).squeeze(-1)


def _eta(config: Any) -> float:
    """``actor.sppo_eta`` from the actor config (typed section, DictConfig or dict); 1.0 when absent."""
    if config is not None and "sppo_eta" in config:
        return float(config["sppo_eta"])
    return 1.0


@register_policy_loss(SPPO_LOSS_MODE)
def compute_sppo_policy_loss(
    old_log_prob: torch.Tensor,
    log_prob: torch.Tensor,
    advantages: torch.Tensor,
    response_mask: torch.Tensor,
    loss_agg_mode: str = "token-mean",
    config: Any = None,
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
    """:func:`compute_sppo_loss` in the policy-loss registry's call convention (``loss_mode=sppo``).

    All tensors ``(bs, response_length)``; ``advantages`` carries each row's sequence reward on its response tokens
    and ``config`` is the actor section (``sppo_eta``). Returns ``(loss, 0, ppo_kl, 0)``: SPPO clips nothing, and
    ``ppo_kl`` is the usual token mean of ``old - new`` log-probs.
    """
    rewards = _rewards_from_advantages(advantages, response_mask)
    loss, _ = compute_sppo_loss(old_log_prob, log_prob, rewards, response_mask, _eta(config), loss_agg_mode)
    ppo_kl = verl_F.masked_mean(old_log_prob - log_prob, response_mask)
    zero = torch.tensor(0.0, device=loss.device)
    return loss, zero, ppo_kl.detach(), zero
