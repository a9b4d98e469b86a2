"""PPO-family losses: the policy losses and their registry, loss aggregation, the value and entropy losses.

Policy losses are registered by name with :func:`register_policy_loss`, so ``actor.policy_loss.loss_mode=<name>``
selects one. Every registered loss follows one contract: ``fn(old_log_prob, log_prob, advantages, response_mask,
loss_agg_mode, config, rollout_is_weights=None)`` with ``(bs, response_length)`` tensors, returning ``(pg_loss,
pg_clipfrac, ppo_kl, pg_clipfrac_lower)``. ``rollout_is_weights`` (rollout correction, ``algorithm.rollout_correction``)
multiplies the per-token loss before aggregation; a loss registered without that keyword still works when the
correction is off. ``pg_clipfrac`` is the fraction of response tokens whose ratio (or weight) was clipped,
``pg_clipfrac_lower`` the part of it clipped at the lower bound; losses without clipping report zeros. ``ppo_kl`` is
the mean of ``old_log_prob - log_prob``.

``verl.trainer.ppo.core_algos`` re-exports every name here: that is where verl users import them from.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch

import verl.utils.torch_functional as verl_F
from verl.trainer.config import ActorConfig


def _check_shapes(**tensors: torch.Tensor) -> None:
    shapes = {name: tuple(t.shape) for name, t in tensors.items()}
    if len(set(shapes.values())) > 1:
        raise ValueError(f"shape mismatch, all of these must be (bs, response_length): {shapes}")


def _weighted(loss_mat: torch.Tensor, rollout_is_weights: torch.Tensor | None) -> torch.Tensor:
    """The per-token loss times the rollout-correction IS weights (constants: no gradient through them)."""
    if rollout_is_weights is None:
        return loss_mat
    _check_shapes(loss_mat=loss_mat, rollout_is_weights=rollout_is_weights)
    return loss_mat * rollout_is_weights.detach().to(loss_mat.dtype)


LOSS_AGG_MODES = ("token-mean", "seq-mean-token-sum", "seq-mean-token-mean", "seq-mean-token-sum-norm")


def agg_loss(
    loss_mat: torch.Tensor, loss_mask: torch.Tensor, loss_agg_mode: str, loss_scale_factor: int | None = None
) -> torch.Tensor:
    """Aggregate a per-token loss to a scalar. loss_mat, loss_mask: ``(bs, response_length)``.

    ``token-mean``: over all tokens; ``seq-mean-token-sum``: mean of per-sequence sums;
    ``seq-mean-token-mean``: mean of per-sequence means (a sequence without tokens counts as 0);
    ``seq-mean-token-sum-norm``: total / T (Dr.GRPO), T being ``loss_scale_factor`` when given (a constant keeps the
    scale fixed across batches), else the response length.
    """
    if loss_agg_mode == "token-mean":
        return verl_F.masked_mean(loss_mat, loss_mask)
    _check_shapes(loss_mat=loss_mat, loss_mask=loss_mask)
    if loss_agg_mode == "seq-mean-token-sum":
        return torch.sum(loss_mat * loss_mask, dim=-1).mean()
    if loss_agg_mode == "seq-mean-token-mean":
        # a row without tokens (rejected by rollout correction) adds 0 instead of verl 0.4.1's 0/0 = NaN
        return (torch.sum(loss_mat * loss_mask, dim=-1) / torch.sum(loss_mask, dim=-1).clamp(min=1)).mean()
    if loss_agg_mode == "seq-mean-token-sum-norm":
        divisor = loss_mask.shape[-1] if loss_scale_factor is None else loss_scale_factor
        return torch.sum(loss_mat * loss_mask) / divisor
    raise ValueError(f"Invalid loss_agg_mode: {loss_agg_mode!r}; expected one of {LOSS_AGG_MODES}")


def compute_policy_loss(
    old_log_prob: torch.Tensor,
    log_prob: torch.Tensor,
    advantages: torch.Tensor,
    response_mask: torch.Tensor,
    cliprange: float | None = None,
    cliprange_low: float | None = None,
    cliprange_high: float | None = None,
    clip_ratio_c: float = 3.0,
    loss_agg_mode: str = "token-mean",
    rollout_is_weights: torch.Tensor | None = None,
    loss_scale_factor: int | None = None,
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
    """Clipped PPO surrogate with asymmetric clip range and dual clip for negative advantages.

    All tensors ``(bs, response_length)``. Returns ``(pg_loss, pg_clipfrac, ppo_kl, pg_clipfrac_lower)``.
    ``loss_scale_factor``: see :func:`agg_loss`.
    """
    assert clip_ratio_c > 1.0, f"clip_ratio_c must be > 1.0 for dual-clip PPO, got {clip_ratio_c}"
    cliprange_low = cliprange if cliprange_low is None else cliprange_low
    cliprange_high = cliprange if cliprange_high is None else cliprange_high
    if cliprange_low is None or cliprange_high is None:
        raise ValueError("compute_policy_loss needs cliprange (or both cliprange_low and cliprange_high)")
    _check_shapes(old_log_prob=old_log_prob, log_prob=log_prob, advantages=advantages, response_mask=response_mask)
    log_ratio = torch.clamp(log_prob - old_log_prob, min=-20.0, max=20.0)  # keeps exp() finite
    ratio = torch.exp(log_ratio)
    ppo_kl = verl_F.masked_mean(-log_ratio, response_mask)
    loss_unclipped = -advantages * ratio
    loss_clipped = -advantages * torch.clamp(ratio, 1 - cliprange_low, 1 + cliprange_high)
    clip1 = torch.maximum(loss_unclipped, loss_clipped)
    pg_clipfrac = verl_F.masked_mean(torch.gt(loss_clipped, loss_unclipped).float(), response_mask)
    loss_dual = -advantages * clip_ratio_c
    clip2 = torch.min(loss_dual, clip1)
    pg_clipfrac_lower = verl_F.masked_mean((torch.gt(clip1, loss_dual) & (advantages < 0)).float(), response_mask)
    pg_losses = torch.where(advantages < 0, clip2, clip1)
    pg_loss = agg_loss(_weighted(pg_losses, rollout_is_weights), response_mask, loss_agg_mode, loss_scale_factor)
    return pg_loss, pg_clipfrac, ppo_kl, pg_clipfrac_lower


POLICY_LOSS_REGISTRY: dict[str, Callable] = {}


def register_policy_loss(name: str) -> Callable[[Callable], Callable]:
    """Decorator registering a policy loss ``fn(old_log_prob, log_prob, advantages, response_mask,
    loss_agg_mode, config) -> (pg_loss, pg_clipfrac, ppo_kl, pg_clipfrac_lower)``."""

    def decorator(fn: Callable) -> Callable:
        POLICY_LOSS_REGISTRY[name] = fn
        return fn

    return decorator


def get_policy_loss_fn(name: str) -> Callable:
    """The policy loss registered as ``actor.policy_loss.loss_mode == name``; ValueError if unknown."""
    if name not in POLICY_LOSS_REGISTRY:
        raise ValueError(f"Unsupported loss mode: {name}. Supported modes are: {list(POLICY_LOSS_REGISTRY)}")
    return POLICY_LOSS_REGISTRY[name]


def _loss_scale(config: Any) -> int | None:
    """The actor's ``loss_scale_factor`` (a dict or DictConfig without one takes the YAML's default, null)."""
    return _actor_config(config).loss_scale_factor


def _actor_config(config: Any) -> ActorConfig:
    """The actor section a registered loss reads (typed; a dict or DictConfig takes the YAML's defaults)."""
    if isinstance(config, ActorConfig):
        return config
    return ActorConfig.from_config(config if config is not None else {})


@register_policy_loss("vanilla")
def compute_policy_loss_vanilla(
    old_log_prob: torch.Tensor,
    log_prob: torch.Tensor,
    advantages: torch.Tensor,
    response_mask: torch.Tensor,
    loss_agg_mode: str = "token-mean",
    config: Any = None,
    rollout_is_weights: torch.Tensor | None = None,
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
    """:func:`compute_policy_loss` with clip ranges read from the actor config (registry call convention)."""
    cfg = _actor_config(config)
    low, high = cfg.clip_range
    return compute_policy_loss(
        old_log_prob,
        log_prob,
        advantages,
        response_mask,
        cliprange=cfg.clip_ratio,
        cliprange_low=low,
        cliprange_high=high,
        clip_ratio_c=cfg.clip_ratio_c,
        loss_agg_mode=loss_agg_mode,
        rollout_is_weights=rollout_is_weights,
        loss_scale_factor=cfg.loss_scale_factor,
    )


@register_policy_loss("clip_cov")
def compute_policy_loss_clip_cov(
    old_log_prob: torch.Tensor,
    log_prob: torch.Tensor,
    advantages: torch.Tensor,
    response_mask: torch.Tensor,
    loss_agg_mode: str = "token-mean",
    config: Any = None,
    rollout_is_weights: torch.Tensor | None = None,
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
    """Clip-Cov: drop the gradient of a random few tokens whose advantage/log-prob covariance is in [lb, ub].

    All tensors ``(bs, response_length)``; params from ``config.policy_loss`` (clip_cov_ratio/lb/ub).
    """
    cfg = _actor_config(config)
    pl = cfg.policy_loss
    ratio_keep, lb, ub = pl.clip_cov_ratio, pl.clip_cov_lb, pl.clip_cov_ub
    assert ratio_keep > 0, f"policy_loss.clip_cov_ratio must be > 0, got {ratio_keep}"
    low, high = cfg.clip_range
    _check_shapes(old_log_prob=old_log_prob, log_prob=log_prob, advantages=advantages, response_mask=response_mask)
    log_ratio = log_prob - old_log_prob
    ratio = torch.exp(log_ratio)
    ppo_kl = verl_F.masked_mean(-log_ratio, response_mask)
    loss1 = -advantages * ratio
    loss2 = -advantages * torch.clamp(ratio, 1 - low, 1 + high)
    valid = response_mask > 0
    with torch.no_grad():
        already_clipped = (loss2 > loss1) & valid
        cov = (advantages - verl_F.masked_mean(advantages, response_mask)) * (
            log_prob.detach() - verl_F.masked_mean(log_prob.detach(), response_mask)
        )
        cov = cov.masked_fill(~valid | already_clipped, -torch.inf)
        n_pick = max(int(ratio_keep * response_mask.sum().item()), 1)
        candidates = torch.nonzero((cov > lb) & (cov < ub) & valid)
        picked = candidates[torch.randperm(len(candidates), device=candidates.device)[:n_pick]]
        corr = torch.ones_like(advantages)
        corr[picked[:, 0], picked[:, 1]] = 0
    pg_clipfrac = verl_F.masked_mean((corr == 0).float(), response_mask)
    pg_loss = agg_loss(
        _weighted(torch.maximum(loss1, loss2) * corr, rollout_is_weights),
        response_mask,
        loss_agg_mode,
        _loss_scale(config),
    )
    return pg_loss, pg_clipfrac, ppo_kl, torch.tensor(0.0, device=pg_loss.device)


@register_policy_loss("kl_cov")
def compute_policy_loss_kl_cov(
    old_log_prob: torch.Tensor,
    log_prob: torch.Tensor,
    advantages: torch.Tensor,
    response_mask: torch.Tensor,
    loss_agg_mode: str = "token-mean",
    config: Any = None,
    rollout_is_weights: torch.Tensor | None = None,
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
    """KL-Cov: unclipped ``-A * ratio`` plus ``coef * |log-ratio|`` on the top-covariance tokens.

    All tensors ``(bs, response_length)``; params ``policy_loss.kl_cov_ratio`` and ``policy_loss.ppo_kl_coef``.
    """
    pl = _actor_config(config).policy_loss
    ratio_top, coef = pl.kl_cov_ratio, pl.ppo_kl_coef
    _check_shapes(old_log_prob=old_log_prob, log_prob=log_prob, advantages=advantages, response_mask=response_mask)
    log_ratio = log_prob - old_log_prob
    abs_kl = log_ratio.abs()
    ratio = torch.exp(log_ratio)
    pg_losses = -advantages * ratio
    valid = (response_mask > 0).reshape(-1)
    n_valid = int(valid.sum().item())
    if n_valid > 0 and ratio_top > 0:
        with torch.no_grad():
            flat_idx = torch.nonzero(valid).flatten()
            adv = advantages.detach().reshape(-1)[flat_idx]
            logp = log_prob.detach().reshape(-1)[flat_idx]
            cov = (adv - adv.mean()) * (logp - logp.mean())
            top = flat_idx[torch.topk(cov, max(1, int(n_valid * ratio_top))).indices]
        penalised = torch.zeros(pg_losses.numel(), dtype=torch.bool, device=pg_losses.device)
        penalised[top] = True
        pg_losses = torch.where(penalised.view_as(pg_losses), pg_losses + coef * abs_kl, pg_losses)
    pg_loss = agg_loss(_weighted(pg_losses, rollout_is_weights), response_mask, loss_agg_mode, _loss_scale(config))
    zero = torch.tensor(0.0, device=pg_loss.device)
    return pg_loss, zero, verl_F.masked_mean(abs_kl, response_mask), zero


# ---- policy losses added to verl after v0.4: GSPO, GPG, GMPO (geo_mean), SAPO, CISPO ----

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
    rollout_is_weights: torch.Tensor | None = None,
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
    pg_losses = _weighted(torch.maximum(loss_unclipped, loss_clipped), rollout_is_weights)
    pg_loss = agg_loss(pg_losses, response_mask, loss_agg_mode, _loss_scale(config))
    return pg_loss, pg_clipfrac, ppo_kl, pg_clipfrac_lower


@register_policy_loss("gpg")
def compute_policy_loss_gpg(
    old_log_prob: torch.Tensor,
    log_prob: torch.Tensor,
    advantages: torch.Tensor,
    response_mask: torch.Tensor,
    loss_agg_mode: str = "token-mean",
    config: Any = None,
    rollout_is_weights: torch.Tensor | None = None,
) -> LossOutput:
    """GPG (Group Policy Gradient, arXiv:2504.02546): plain REINFORCE ``-A * log_prob``, no ratio, no clipping.

    ``old_log_prob`` only feeds the ``ppo_kl`` metric; ``config`` gives only ``loss_scale_factor``.
    """
    _, ppo_kl = _log_ratio_and_kl(old_log_prob, log_prob, advantages, response_mask)
    pg_loss = agg_loss(
        _weighted(-advantages * log_prob, rollout_is_weights), response_mask, loss_agg_mode, _loss_scale(config)
    )
    return pg_loss, _zero(pg_loss), ppo_kl, _zero(pg_loss)


@register_policy_loss("geo_mean")
def compute_policy_loss_geo_mean(
    old_log_prob: torch.Tensor,
    log_prob: torch.Tensor,
    advantages: torch.Tensor,
    response_mask: torch.Tensor,
    loss_agg_mode: str = "seq-mean-token-mean",
    config: Any = None,
    rollout_is_weights: torch.Tensor | None = None,
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
    pg_loss = agg_loss(
        _weighted(seq_loss.expand_as(log_ratio), rollout_is_weights), response_mask, loss_agg_mode, _loss_scale(config)
    )
    return pg_loss, pg_clipfrac, ppo_kl, pg_clipfrac_lower


@register_policy_loss("sapo")
def compute_policy_loss_sapo(
    old_log_prob: torch.Tensor,
    log_prob: torch.Tensor,
    advantages: torch.Tensor,
    response_mask: torch.Tensor,
    loss_agg_mode: str = "token-mean",
    config: Any = None,
    rollout_is_weights: torch.Tensor | None = None,
) -> LossOutput:
    """SAPO (arXiv:2511.20347): a smooth sigmoid gate on the token ratio instead of PPO's hard clip.

    ``loss = -A * (4 / tau) * sigmoid(tau * (r - 1))`` with ``r = exp(log_prob - old_log_prob)`` and
    ``tau = actor.tau_pos`` where ``A > 0``, else ``actor.tau_neg``. At ``r = 1`` its gradient equals
    PPO's (``sigmoid'(0) * 4 = 1``); far off-policy tokens fade smoothly instead of being cut off, and a larger tau
    fades faster (the paper takes ``tau_neg > tau_pos``: negative updates are the less stable).
    """
    cfg = _actor_config(config)  # verl 0.9's place of the temperatures (policy_loss.tau_* are unified with them)
    tau_pos, tau_neg = cfg.tau_pos, cfg.tau_neg
    for key, tau in (("tau_pos", tau_pos), ("tau_neg", tau_neg)):
        if not tau > 0:
            raise ValueError(f"actor_rollout_ref.actor.{key}={tau!r} must be > 0 for loss_mode='sapo'")
    log_ratio, ppo_kl = _log_ratio_and_kl(old_log_prob, log_prob, advantages, response_mask)
    ratio = torch.exp(torch.clamp(log_ratio, -_MAX_LOG_RATIO, _MAX_LOG_RATIO))
    tau = torch.where(advantages > 0, tau_pos, tau_neg).to(ratio.dtype)
    gate = torch.sigmoid(tau * (ratio - 1)) * (4 / tau)
    pg_loss = agg_loss(
        _weighted(-advantages * gate, rollout_is_weights), response_mask, loss_agg_mode, _loss_scale(config)
    )
    return pg_loss, _zero(pg_loss), ppo_kl, _zero(pg_loss)


@register_policy_loss("cispo")
def compute_policy_loss_cispo(
    old_log_prob: torch.Tensor,
    log_prob: torch.Tensor,
    advantages: torch.Tensor,
    response_mask: torch.Tensor,
    loss_agg_mode: str = "token-mean",
    config: Any = None,
    rollout_is_weights: torch.Tensor | None = None,
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
    pg_loss = agg_loss(
        _weighted(-weight * advantages * log_prob, rollout_is_weights),
        response_mask,
        loss_agg_mode,
        _loss_scale(config),
    )
    return pg_loss, pg_clipfrac, ppo_kl, pg_clipfrac_lower


# ---- value and entropy losses ----


def compute_entropy_loss(
    logits: torch.Tensor, response_mask: torch.Tensor, loss_agg_mode: str = "token-mean"
) -> torch.Tensor:
    """Aggregated entropy of ``softmax(logits)``. logits ``(bs, response_length, vocab)``, mask ``(bs, T)``."""
    return agg_loss(verl_F.entropy_from_logits(logits), response_mask, loss_agg_mode)


def compute_value_loss(
    vpreds: torch.Tensor,
    returns: torch.Tensor,
    values: torch.Tensor,
    response_mask: torch.Tensor,
    cliprange_value: float,
    loss_agg_mode: str = "token-mean",
    loss_scale_factor: int | None = None,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Clipped value loss ``0.5 * agg(max((v - R)^2, (v_clip - R)^2))``; returns ``(vf_loss, vf_clipfrac)``.

    All tensors ``(bs, response_length)``; ``v_clip`` stays within ``cliprange_value`` of the old ``values``.
    ``loss_scale_factor``: see :func:`agg_loss`.
    """
    _check_shapes(vpreds=vpreds, returns=returns, values=values, response_mask=response_mask)
    vpred_clipped = verl_F.clip_by_value(vpreds, values - cliprange_value, values + cliprange_value)
    loss_unclipped = (vpreds - returns) ** 2
    loss_clipped = (vpred_clipped - returns) ** 2
    vf_loss = 0.5 * agg_loss(torch.max(loss_unclipped, loss_clipped), response_mask, loss_agg_mode, loss_scale_factor)
    vf_clipfrac = verl_F.masked_mean(torch.gt(loss_clipped, loss_unclipped).float(), response_mask)
    return vf_loss, vf_clipfrac
