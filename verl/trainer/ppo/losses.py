"""Policy, value and entropy losses and their aggregation (re-exported by ``verl.trainer.ppo.core_algos``)."""

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


LOSS_AGG_MODES = ("token-mean", "seq-mean-token-sum", "seq-mean-token-mean", "seq-mean-token-sum-norm")


def agg_loss(loss_mat: torch.Tensor, loss_mask: torch.Tensor, loss_agg_mode: str) -> torch.Tensor:
    """Aggregate a per-token loss to a scalar. loss_mat, loss_mask: ``(bs, response_length)``.

    ``token-mean``: over all tokens; ``seq-mean-token-sum``: mean of per-sequence sums;
    ``seq-mean-token-mean``: mean of per-sequence means; ``seq-mean-token-sum-norm``: total / T (Dr.GRPO).
    """
    if loss_agg_mode == "token-mean":
        return verl_F.masked_mean(loss_mat, loss_mask)
    _check_shapes(loss_mat=loss_mat, loss_mask=loss_mask)
    if loss_agg_mode == "seq-mean-token-sum":
        return torch.sum(loss_mat * loss_mask, dim=-1).mean()
    if loss_agg_mode == "seq-mean-token-mean":
        return (torch.sum(loss_mat * loss_mask, dim=-1) / torch.sum(loss_mask, dim=-1)).mean()
    if loss_agg_mode == "seq-mean-token-sum-norm":
        return torch.sum(loss_mat * loss_mask) / loss_mask.shape[-1]
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
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
    """Clipped PPO surrogate with asymmetric clip range and dual clip for negative advantages.

    All tensors ``(bs, response_length)``. Returns ``(pg_loss, pg_clipfrac, ppo_kl, pg_clipfrac_lower)``.
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
    pg_loss = agg_loss(pg_losses, response_mask, loss_agg_mode)
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
    )


@register_policy_loss("clip_cov")
def compute_policy_loss_clip_cov(
    old_log_prob: torch.Tensor,
    log_prob: torch.Tensor,
    advantages: torch.Tensor,
    response_mask: torch.Tensor,
    loss_agg_mode: str = "token-mean",
    config: Any = None,
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
    pg_loss = agg_loss(torch.maximum(loss1, loss2) * corr, response_mask, loss_agg_mode)
    return pg_loss, pg_clipfrac, ppo_kl, torch.tensor(0.0, device=pg_loss.device)


@register_policy_loss("kl_cov")
def compute_policy_loss_kl_cov(
    old_log_prob: torch.Tensor,
    log_prob: torch.Tensor,
    advantages: torch.Tensor,
    response_mask: torch.Tensor,
    loss_agg_mode: str = "token-mean",
    config: Any = None,
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
    pg_loss = agg_loss(pg_losses, response_mask, loss_agg_mode)
    zero = torch.tensor(0.0, device=pg_loss.device)
    return pg_loss, zero, verl_F.masked_mean(abs_kl, response_mask), zero


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
) -> tuple[torch.Tensor, torch.Tensor]:
    """Clipped value loss ``0.5 * agg(max((v - R)^2, (v_clip - R)^2))``; returns ``(vf_loss, vf_clipfrac)``.

    All tensors ``(bs, response_length)``; ``v_clip`` stays within ``cliprange_value`` of the old ``values``.
    """
    _check_shapes(vpreds=vpreds, returns=returns, values=values, response_mask=response_mask)
    vpred_clipped = verl_F.clip_by_value(vpreds, values - cliprange_value, values + cliprange_value)
    loss_unclipped = (vpreds - returns) ** 2
    loss_clipped = (vpred_clipped - returns) ** 2
    vf_loss = 0.5 * agg_loss(torch.max(loss_unclipped, loss_clipped), response_mask, loss_agg_mode)
    vf_clipfrac = verl_F.masked_mean(torch.gt(loss_clipped, loss_unclipped).float(), response_mask)
    return vf_loss, vf_clipfrac
