"""Policy losses added to verl after v0.4: GSPO, GPG, GMPO (``geo_mean``), SAPO and CISPO.

Each is registered by name with :func:`register_policy_loss`, so ``actor.policy_loss.loss_mode=<name>`` selects it;
``verl.trainer.ppo.core_algos`` imports this module, which registers them. Every loss follows the registry contract:
``fn(old_log_prob, log_prob, advantages, response_mask, loss_agg_mode, config)`` with ``(bs, response_length)``
tensors, returning ``(pg_loss, pg_clipfrac, ppo_kl, pg_clipfrac_lower)``. ``pg_clipfrac`` is the fraction of
response tokens whose ratio (or weight) was clipped, ``pg_clipfrac_lower`` the part of it clipped at the lower
bound; losses without clipping report zeros. ``ppo_kl`` is the mean of ``old_log_prob - log_prob``.
"""

from __future__ import annotations

from typing import Any

import torch

import verl.utils.torch_functional as verl_F
from verl.trainer.ppo.losses import _actor_config, _check_shapes, agg_loss, register_policy_loss

__all__ = [
    "compute_policy_loss_cispo",
    "compute_policy_loss_geo_mean",
    "compute_policy_loss_gpg",
    "compute_policy_loss_gspo",
    "compute_policy_loss_sapo",
]

LossOutput = tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]
# exp() of a log-ratio beyond this overflows nothing in fp32 and is far outside any clip range
_MAX_LOG_RATIO = 20.0


def _log_ratio_and_kl(
    old_log_prob: torch.Tensor, log_prob: torch.Tensor, advantages: torch.Tensor, response_mask: torch.Tensor
) -> tuple[torch.Tensor, torch.Tensor]:
    """Per-token ``log_prob - old_log_prob`` and its masked mean negated (the ``ppo_kl`` metric)."""
    _check_shapes(old_log_prob=old_log_prob, log_prob=log_prob, advantages=advantages, response_mask=response_mask)
    log_ratio = log_prob - old_log_prob
    return log_ratio, verl_F.masked_mean(-log_ratio.detach(), response_mask)


def _sequence_mean(values: torch.Tensor, response_mask: torch.Tensor) -> torch.Tensor:
    """Mean over each sequence's response tokens: ``(bs, T) -> (bs, 1)``; an empty response gives 0."""
    lengths = response_mask.sum(dim=-1, keepdim=True).clamp(min=1)
    return (values * response_mask).sum(dim=-1, keepdim=True) / lengths


def _zero(like: torch.Tensor) -> torch.Tensor:
    return torch.zeros((), dtype=like.dtype, device=like.device)


@register_policy_loss("gspo")
def compute_policy_loss_gspo(
    old_log_prob: torch.Tensor,
    log_prob: torch.Tensor,
    advantages: torch.Tensor,
    response_mask: torch.Tensor,
    loss_agg_mode: str = "seq-mean-token-mean",
    config: Any = None,
) -> LossOutput:
    """GSPO-token (arXiv:2507.18071): PPO clipping of the sequence-level, length-normalised ratio.

    ``s_i = exp(mean_t(log_prob - old_log_prob))`` over sequence i's response tokens. Each token carries
    ``s_i,t = sg(s_i) * pi(y_t) / sg(pi(y_t))``: the value of ``s_i``, the gradient of its own log-prob, so
    per-token advantages work. Loss ``max(-A * s_i,t, -A * clip(s_i,t, 1 - clip_ratio_low, 1 + clip_ratio_high))``
    (no dual clip), aggregated with ``loss_agg_mode`` (the paper uses ``seq-mean-token-mean``).
    """
    low, high = _actor_config(config).clip_range
    log_ratio, ppo_kl = _log_ratio_and_kl(old_log_prob, log_prob, advantages, response_mask)
    seq_log_ratio = _sequence_mean(log_ratio, response_mask).detach()
    token_log_ratio = seq_log_ratio + log_prob - log_prob.detach()
    ratio = torch.exp(torch.clamp(token_log_ratio, -_MAX_LOG_RATIO, _MAX_LOG_RATIO))
    loss_unclipped = -advantages * ratio
    loss_clipped = -advantages * torch.clamp(ratio, 1 - low, 1 + high)
    clipped = loss_clipped > loss_unclipped
    pg_clipfrac = verl_F.masked_mean(clipped.float(), response_mask)
    pg_clipfrac_lower = verl_F.masked_mean((clipped & (advantages < 0)).float(), response_mask)
    pg_loss = agg_loss(torch.maximum(loss_unclipped, loss_clipped), response_mask, loss_agg_mode)
    return pg_loss, pg_clipfrac, ppo_kl, pg_clipfrac_lower


@register_policy_loss("gpg")
def compute_policy_loss_gpg(
    old_log_prob: torch.Tensor,
    log_prob: torch.Tensor,
    advantages: torch.Tensor,
    response_mask: torch.Tensor,
    loss_agg_mode: str = "token-mean",
    config: Any = None,
) -> LossOutput:
    """GPG (Group Policy Gradient, arXiv:2504.02546): plain REINFORCE ``-A * log_prob``, no ratio, no clipping.

    ``old_log_prob`` only feeds the ``ppo_kl`` metric; ``config`` is unused (kept for the registry contract).
    """
    _, ppo_kl = _log_ratio_and_kl(old_log_prob, log_prob, advantages, response_mask)
    pg_loss = agg_loss(-advantages * log_prob, response_mask, loss_agg_mode)
    return pg_loss, _zero(pg_loss), ppo_kl, _zero(pg_loss)


@register_policy_loss("geo_mean")
def compute_policy_loss_geo_mean(
    old_log_prob: torch.Tensor,
    log_prob: torch.Tensor,
    advantages: torch.Tensor,
    response_mask: torch.Tensor,
    loss_agg_mode: str = "seq-mean-token-mean",
    config: Any = None,
) -> LossOutput:
    """GMPO (arXiv:2507.20673): maximise the geometric mean of the token ratios, clipped per token in log space.

    Per token, ``l = log_prob - old_log_prob`` is clipped to ``[-clip_ratio_low, clip_ratio_high]`` pessimistically
    for the sign of the advantage (``sgn(A) * min(sgn(A) * l, sgn(A) * clip(l))``, PPO's trust region in log
    space). Sequence i's loss is ``-mean_t(A) * exp(mean_t(clipped l))``; it is given to each of its response tokens
    and aggregated with ``loss_agg_mode`` (``seq-mean-token-mean``, the paper's, averages it over sequences).
    The paper's clip range is wide: ``clip_ratio_low = clip_ratio_high = 0.4`` (ratios in ``[e^-0.4, e^0.4]``).
    """
    low, high = _actor_config(config).clip_range
    log_ratio, ppo_kl = _log_ratio_and_kl(old_log_prob, log_prob, advantages, response_mask)
    sign = torch.sign(advantages)
    clipped_log_ratio = torch.clamp(log_ratio, -low, high)
    pessimistic = sign * torch.minimum(sign * log_ratio, sign * clipped_log_ratio)
    seq_ratio = torch.exp(torch.clamp(_sequence_mean(pessimistic, response_mask), -_MAX_LOG_RATIO, _MAX_LOG_RATIO))
    seq_loss = -_sequence_mean(advantages, response_mask) * seq_ratio
    # the clip is active where the pessimistic choice took the clipped value (no gradient through that token)
    clipped = ((log_ratio > high) & (advantages > 0)) | ((log_ratio < -low) & (advantages < 0))
    pg_clipfrac = verl_F.masked_mean(clipped.float(), response_mask)
    pg_clipfrac_lower = verl_F.masked_mean((clipped & (advantages < 0)).float(), response_mask)
    pg_loss = agg_loss(seq_loss.expand_as(log_ratio), response_mask, loss_agg_mode)
    return pg_loss, pg_clipfrac, ppo_kl, pg_clipfrac_lower


@register_policy_loss("sapo")
def compute_policy_loss_sapo(
    old_log_prob: torch.Tensor,
    log_prob: torch.Tensor,
    advantages: torch.Tensor,
    response_mask: torch.Tensor,
    loss_agg_mode: str = "token-mean",
    config: Any = None,
) -> LossOutput:
    """SAPO (arXiv:2511.20347): a smooth sigmoid gate on the token ratio instead of PPO's hard clip.

    ``loss = -A * (4 / tau) * sigmoid(tau * (r - 1))`` with ``r = exp(log_prob - old_log_prob)`` and
    ``tau = policy_loss.tau_pos`` where ``A > 0``, else ``policy_loss.tau_neg``. At ``r = 1`` its gradient equals
    PPO's (``sigmoid'(0) * 4 = 1``); far off-policy tokens fade smoothly instead of being cut off, and a larger tau
    fades faster (the paper takes ``tau_neg > tau_pos``: negative updates are the less stable).
    """
    policy_loss = _actor_config(config).policy_loss
    tau_pos, tau_neg = policy_loss.tau_pos, policy_loss.tau_neg
    for key, tau in (("tau_pos", tau_pos), ("tau_neg", tau_neg)):
        if not tau > 0:
            raise ValueError(f"actor_rollout_ref.actor.policy_loss.{key}={tau!r} must be > 0 for loss_mode='sapo'")
    log_ratio, ppo_kl = _log_ratio_and_kl(old_log_prob, log_prob, advantages, response_mask)
    ratio = torch.exp(torch.clamp(log_ratio, -_MAX_LOG_RATIO, _MAX_LOG_RATIO))
    tau = torch.where(advantages > 0, tau_pos, tau_neg).to(ratio.dtype)
    gate = torch.sigmoid(tau * (ratio - 1)) * (4 / tau)
    pg_loss = agg_loss(-advantages * gate, response_mask, loss_agg_mode)
    return pg_loss, _zero(pg_loss), ppo_kl, _zero(pg_loss)


@register_policy_loss("cispo")
def compute_policy_loss_cispo(
    old_log_prob: torch.Tensor,
    log_prob: torch.Tensor,
    advantages: torch.Tensor,
    response_mask: torch.Tensor,
    loss_agg_mode: str = "token-mean",
    config: Any = None,
) -> LossOutput:
    """CISPO (MiniMax-M1, arXiv:2506.13585): clip the importance-sampling weight, not the update.

    ``loss = -sg(clip(r, 1 - clip_ratio_low, 1 + clip_ratio_high)) * A * log_prob``: the clipped weight is a
    constant, so every token keeps the REINFORCE gradient ``-w * A * grad log_prob``, rare tokens with large
    ratios included (PPO would drop them). The paper bounds only the top: set ``clip_ratio_low`` large (e.g. 10).
    """
    low, high = _actor_config(config).clip_range
    log_ratio, ppo_kl = _log_ratio_and_kl(old_log_prob, log_prob, advantages, response_mask)
    ratio = torch.exp(torch.clamp(log_ratio.detach(), -_MAX_LOG_RATIO, _MAX_LOG_RATIO))
    weight = torch.clamp(ratio, 1 - low, 1 + high)
    above, below = ratio > 1 + high, ratio < 1 - low
    pg_clipfrac = verl_F.masked_mean((above | below).float(), response_mask)
    pg_clipfrac_lower = verl_F.masked_mean(below.float(), response_mask)
    pg_loss = agg_loss(-weight * advantages * log_prob, response_mask, loss_agg_mode)
    return pg_loss, pg_clipfrac, ppo_kl, pg_clipfrac_lower
