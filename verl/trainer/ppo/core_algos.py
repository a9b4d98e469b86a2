"""PPO-family algorithm core: advantage estimators and their registry, the advantage dispatch used by the trainer,
KL penalties and controllers (with the in-reward KL penalty), and, by re-export from
:mod:`verl.trainer.ppo.losses`, the policy/value/entropy losses verl users import from here.

Every advantage estimator works on the whole batch at once: group statistics (GRPO, RLOO, OPO, ...) are
computed with ``index_add``/``bincount`` over integer group ids derived once from the ``uid`` strings, and
the token-wise recursions loop over the response length only (never over samples).
"""

from __future__ import annotations

import copy
import inspect
from collections.abc import Callable
from enum import Enum
from typing import Any

import numpy as np
import pandas as pd
import torch

import verl.utils.torch_functional as verl_F
from verl.protocol import DataProto
from verl.trainer.config.algorithm import AlgoConfig, KLControlConfig
from verl.trainer.ppo.losses import (  # noqa: F401  (verl users import the losses from core_algos)
    LOSS_AGG_MODES,
    POLICY_LOSS_REGISTRY,
    _check_shapes,
    agg_loss,
    compute_entropy_loss,
    compute_policy_loss,
    compute_policy_loss_cispo,
    compute_policy_loss_clip_cov,
    compute_policy_loss_geo_mean,
    compute_policy_loss_gpg,
    compute_policy_loss_gspo,
    compute_policy_loss_kl_cov,
    compute_policy_loss_sapo,
    compute_policy_loss_vanilla,
    compute_value_loss,
    get_policy_loss_fn,
    register_policy_loss,
)

__all__ = ["register_adv_est", "get_adv_estimator_fn", "AdvantageEstimator"]


# ==========================================================================================================
# KL controllers and estimators
# ==========================================================================================================
class AdaptiveKLController:
    """Adaptive KL coefficient (Ziegler et al. 2019): moves ``value`` towards ``target_kl`` over ``horizon``."""

    def __init__(self, init_kl_coef: float, target_kl: float, horizon: int):
        self.value = init_kl_coef
        self.target = target_kl
        self.horizon = horizon

    def update(self, current_kl: float, n_steps: int) -> None:
        """Scale ``value`` by ``1 + clip(kl / target - 1, -0.2, 0.2) * n_steps / horizon``."""
        proportional_error = np.clip(current_kl / self.target - 1, -0.2, 0.2)
        self.value *= 1 + proportional_error * n_steps / self.horizon


class FixedKLController:
    """Constant KL coefficient."""

    def __init__(self, kl_coef: float):
        self.value = kl_coef

    def update(self, current_kl: float, n_steps: int) -> None:
        """No-op: the coefficient never changes."""


def get_kl_controller(kl_ctrl: Any) -> FixedKLController | AdaptiveKLController:
    """Build the controller named by ``kl_ctrl.type`` (``fixed`` or ``adaptive``) from ``algorithm.kl_ctrl``."""
    kl_ctrl = KLControlConfig.from_config(kl_ctrl)
    if kl_ctrl.type == "fixed":
        return FixedKLController(kl_coef=kl_ctrl.kl_coef)
    if kl_ctrl.type == "adaptive":
        assert kl_ctrl.horizon > 0, f"algorithm.kl_ctrl.horizon must be > 0, got {kl_ctrl.horizon}"
        return AdaptiveKLController(kl_ctrl.kl_coef, kl_ctrl.target_kl, kl_ctrl.horizon)
    raise NotImplementedError(f"Unknown algorithm.kl_ctrl.type {kl_ctrl.type!r}; expected 'fixed' or 'adaptive'")


def kl_penalty(logprob: torch.Tensor, ref_logprob: torch.Tensor, kl_penalty: str) -> torch.Tensor:
    """Per-token KL estimate of KL(pi || ref). logprob, ref_logprob: ``(bs, response_length)``.

    ``kl``/``k1``: d; ``abs``: ``|d|``; ``mse``/``k2``: d^2/2; ``low_var_kl``/``k3``: exp(-d) + d - 1 (clamped),
    with ``d = logprob - ref_logprob``. A trailing ``+`` (e.g. ``k3+``) keeps that value but takes the
    gradient of ``k2`` (straight-through), which is unbiased for the KL gradient.
    """
    if kl_penalty.endswith("+"):
        forward = kl_penalty_forward(logprob, ref_logprob, kl_penalty[:-1])
        backward = 0.5 * (logprob - ref_logprob).square()
        return backward - backward.detach() + forward.detach()
    return kl_penalty_forward(logprob, ref_logprob, kl_penalty)


def kl_penalty_forward(logprob: torch.Tensor, ref_logprob: torch.Tensor, kl_penalty: str) -> torch.Tensor:
    """The KL estimators of :func:`kl_penalty` without the straight-through variants."""
    if kl_penalty in ("kl", "k1"):
        return logprob - ref_logprob
    if kl_penalty == "abs":
        return (logprob - ref_logprob).abs()
    if kl_penalty in ("mse", "k2"):
        return 0.5 * (logprob - ref_logprob).square()
    if kl_penalty in ("low_var_kl", "k3"):
        # J. Schulman's k3 estimator; the clamps keep exp() finite for far-apart policies
        kl = torch.clamp(ref_logprob - logprob, min=-20, max=20)
        return torch.clamp(torch.exp(kl) - kl - 1, min=-10, max=10)
    if kl_penalty == "full":
        raise NotImplementedError("kl_penalty='full' needs full-vocabulary log-probs and is not implemented")
    raise NotImplementedError(
        f"Unknown kl_penalty {kl_penalty!r}; expected one of kl/k1, abs, mse/k2, low_var_kl/k3 (optionally with '+')"
    )


def compute_rewards(
    token_level_scores: torch.Tensor, old_log_prob: torch.Tensor, ref_log_prob: torch.Tensor, kl_ratio: float
) -> torch.Tensor:
    """Legacy in-reward KL: ``scores - (old - ref) * kl_ratio``. All ``(bs, response_length)``."""
    return token_level_scores - (old_log_prob - ref_log_prob) * kl_ratio


# ==========================================================================================================
# advantage-estimator registry
# ==========================================================================================================
class AdvantageEstimator(str, Enum):
    """Names of the built-in advantage estimators (``algorithm.adv_estimator``)."""

    GAE = "gae"
    GRPO = "grpo"
    REINFORCE_PLUS_PLUS = "reinforce_plus_plus"
    REINFORCE_PLUS_PLUS_BASELINE = "reinforce_plus_plus_baseline"
    REMAX = "remax"
    RLOO = "rloo"
    OPO = "opo"
    GRPO_PASSK = "grpo_passk"
    GPG = "gpg"


ADV_ESTIMATOR_REGISTRY: dict[str, Callable] = {}


def _estimator_name(name_or_enum: str | Enum) -> str:
    return name_or_enum.value if isinstance(name_or_enum, Enum) else name_or_enum


def register_adv_est(name_or_enum: str | AdvantageEstimator) -> Callable[[Callable], Callable]:
    """Decorator registering an advantage estimator under a name (or an enum's value)."""

    def decorator(fn: Callable) -> Callable:
        name = _estimator_name(name_or_enum)
        # ADV_ESTIMATOR_REGISTRY is looked up at call time so tests may swap the module-level dict
        if name in ADV_ESTIMATOR_REGISTRY and ADV_ESTIMATOR_REGISTRY[name] != fn:
            raise ValueError(
                f"Advantage estimator {name!r} is already registered to {ADV_ESTIMATOR_REGISTRY[name]}, not {fn}"
            )
        ADV_ESTIMATOR_REGISTRY[name] = fn
        return fn

    return decorator


def get_adv_estimator_fn(name_or_enum: str | AdvantageEstimator) -> Callable:
    """The estimator registered under ``name_or_enum`` (case-sensitive); ValueError if unknown."""
    name = _estimator_name(name_or_enum)
    if name not in ADV_ESTIMATOR_REGISTRY:
        raise ValueError(f"Unknown advantage estimator simply: {name} (registered: {sorted(ADV_ESTIMATOR_REGISTRY)})")
    return ADV_ESTIMATOR_REGISTRY[name]


# ==========================================================================================================
# whole-batch group statistics
# ==========================================================================================================
def _group_ids(index: Any, batch_size: int, device: torch.device) -> tuple[torch.Tensor, int]:
    """Map per-row group keys (uid strings, ints, ...) to contiguous int ids ``(bs,)``; returns ids and #groups."""
    index = np.asarray(index)
    if index.ndim != 1 or len(index) != batch_size:
        raise ValueError(f"index must have one group id per row: got shape {index.shape} for batch size {batch_size}")
    if batch_size == 0:
        raise ValueError("index is empty: an advantage estimator needs at least one group with one sample")
    # hash-based factorisation: O(bs), ~7x faster than np.unique's sort on uid strings
    codes, uniques = pd.factorize(index)
    if (codes < 0).any():
        raise ValueError(f"index contains missing group ids (None/NaN) at rows {np.flatnonzero(codes < 0)[:5]}")
    return torch.as_tensor(codes, dtype=torch.long, device=device), len(uniques)


class _Groups:
    """Per-group count, mean and unbiased std of sequence scores ``(bs,)``, all computed in float64."""

    def __init__(self, scores: torch.Tensor, index: Any):
        self.ids, n_groups = _group_ids(index, scores.shape[0], scores.device)
        s = scores.double()
        self.count = torch.bincount(self.ids, minlength=n_groups).double()
        self.mean = torch.zeros(n_groups, dtype=torch.float64, device=s.device).index_add_(0, self.ids, s) / self.count
        sq = torch.zeros_like(self.mean).index_add_(0, self.ids, (s - self.mean[self.ids]).square())
        self.std = torch.sqrt(sq / (self.count - 1).clamp(min=1))

    def per_row(self, stat: torch.Tensor) -> torch.Tensor:
        return stat[self.ids]


def _outcome(per_seq: torch.Tensor, like: torch.Tensor, response_mask: torch.Tensor) -> torch.Tensor:
    """Broadcast a per-sequence value ``(bs,)`` over the response tokens, zero at padding."""
    return per_seq.to(like.dtype).unsqueeze(-1) * response_mask


# ==========================================================================================================
# advantage estimators
# ==========================================================================================================
@register_adv_est(AdvantageEstimator.GAE)
def compute_gae_advantage_return(
    token_level_rewards: torch.Tensor,
    values: torch.Tensor,
    response_mask: torch.Tensor,
    gamma: float | torch.Tensor,
    lam: float | torch.Tensor,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Generalised advantage estimation; returns whitened ``advantages`` and ``returns = A + V``.

    All tensors ``(bs, response_length)``. Positions with ``response_mask == 0`` (padding, or tool
    observations in multi-turn) are skipped: the next value and running advantage carry through them.
    """
    _check_shapes(token_level_rewards=token_level_rewards, values=values, response_mask=response_mask)
    with torch.no_grad():
        # time-major copies make every step below a contiguous row operation
        rewards_t, values_t, mask_t = token_level_rewards.T.contiguous(), values.T.contiguous(), response_mask.T
        mask_t = mask_t.to(values.dtype).contiguous()
        next_values = torch.zeros_like(values_t[0])
        last_gae = torch.zeros_like(values_t[0])
        adv_t = torch.empty_like(values_t)
        for t in range(values_t.shape[0] - 1, -1, -1):
            delta = rewards_t[t] + gamma * next_values - values_t[t]
            gae = delta + gamma * lam * last_gae
            m = mask_t[t]
            next_values = values_t[t] * m + (1 - m) * next_values
            last_gae = gae * m + (1 - m) * last_gae
            adv_t[t] = last_gae
        advantages = adv_t.T
        returns = advantages + values
        advantages = verl_F.masked_whiten(advantages, response_mask)
    return advantages, returns


@register_adv_est(AdvantageEstimator.GRPO)
def compute_grpo_outcome_advantage(
    token_level_rewards: torch.Tensor,
    response_mask: torch.Tensor,
    index: np.ndarray,
    epsilon: float = 1e-6,
    norm_adv_by_std_in_grpo: bool = True,
    config: Any = None,
    **kwargs,
) -> tuple[torch.Tensor, torch.Tensor]:
    """GRPO: ``(s_i - mean_group) / (std_group + eps)``, or ``s_i - mean_group`` (Dr.GRPO) without std.

    token_level_rewards, response_mask: ``(bs, response_length)``; index: ``(bs,)`` group ids (uids).
    A group of one sample uses mean 0 and std 1. Returns ``(advantages, returns)``, the same tensor.
    """
    _check_shapes(token_level_rewards=token_level_rewards, response_mask=response_mask)
    with torch.no_grad():
        scores = token_level_rewards.sum(dim=-1)
        g = _Groups(scores, index)
        single = g.count == 1
        mean = torch.where(single, torch.zeros_like(g.mean), g.mean)
        std = torch.where(single, torch.ones_like(g.std), g.std)
        adv = scores.double() - g.per_row(mean)
        if norm_adv_by_std_in_grpo:
            adv = adv / (g.per_row(std) + epsilon)
        advantages = _outcome(adv, token_level_rewards, response_mask)
    return advantages, advantages


@register_adv_est(AdvantageEstimator.GRPO_PASSK)
def compute_grpo_passk_outcome_advantage(
    token_level_rewards: torch.Tensor,
    response_mask: torch.Tensor,
    index: np.ndarray,
    epsilon: float = 1e-6,
    norm_adv_by_std_in_grpo: bool = True,
    config: Any = None,
    **kwargs,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Pass@k GRPO: only each group's best sample gets ``r_max - r_second`` (over ``std + eps`` if normalising).

    Needs ``config`` (reads ``norm_adv_by_std_in_grpo``) and groups of at least 2 samples.
    Shapes as :func:`compute_grpo_outcome_advantage`.
    """
    assert config is not None, "grpo_passk needs the algorithm config (for norm_adv_by_std_in_grpo)"
    _check_shapes(token_level_rewards=token_level_rewards, response_mask=response_mask)
    norm = AlgoConfig.from_config(config).norm_adv_by_std_in_grpo
    with torch.no_grad():
        scores = token_level_rewards.sum(dim=-1)
        g = _Groups(scores, index)
        small = torch.nonzero(g.count < 2).flatten()
        if len(small):
            uids = pd.unique(np.asarray(index))[small.cpu().numpy()]
            raise ValueError(f"grpo_passk needs at least 2 samples per group; groups with fewer: {list(uids[:5])}")
        s = scores.double()
        n_groups, rows = g.count.shape[0], torch.arange(s.shape[0], device=s.device)
        group_max = torch.full((n_groups,), -torch.inf, dtype=s.dtype, device=s.device)
        group_max = group_max.scatter_reduce(0, g.ids, s, reduce="amax")
        # exactly one winner per group: the first row reaching the maximum
        at_max = torch.where(s == group_max[g.ids], rows, s.shape[0])
        winner = torch.full((n_groups,), s.shape[0], device=s.device).scatter_reduce(0, g.ids, at_max, reduce="amin")
        is_winner = rows == winner[g.ids]
        second = torch.full_like(group_max, -torch.inf).scatter_reduce(
            0, g.ids, torch.where(is_winner, -torch.inf, s), reduce="amax"
        )
        gap = group_max - second
        if norm:
            gap = gap / (g.std + epsilon)
        adv = torch.where(is_winner, g.per_row(gap), torch.zeros_like(s))
        advantages = _outcome(adv, token_level_rewards, response_mask)
    return advantages, advantages


# Row chunks of (bs, T) work: bounds float64 temporaries while keeping the number of ops small.
_CHUNK_ELEMENTS = 1 << 18


def _discounted_returns(rewards: torch.Tensor, mask: torch.Tensor, gamma: float) -> torch.Tensor:
    """``G_t = r_t + gamma * m_{t+1} * G_{t+1}`` (a zero mask cuts the chain), vectorised over the batch.

    rewards, mask: ``(bs, T)``. Closed form with ``x_k = gamma^k r_k`` and its running sum ``C``:
    ``G_t = gamma^-t (C_{e(t)-1} - C_t + x_t)``, where ``e(t)`` is the first position after ``t`` whose mask
    is 0 (or ``T``). Row chunks bound the float64 temporaries; falls back to a loop over ``T`` when
    ``gamma^T`` would underflow float64.
    """
    gamma = float(gamma)
    bs, T = rewards.shape
    if gamma <= 0 or (gamma < 1 and T * np.log10(1 / gamma) > 250):
        running, out = torch.zeros(bs, dtype=torch.float64, device=rewards.device), torch.empty_like(rewards.T)
        r_t, m_t = rewards.T.double().contiguous(), mask.T.double().contiguous()
        for t in range(T - 1, -1, -1):
            running = r_t[t] + gamma * running
            out[t] = running
            running = running * m_t[t]
        return out.T
    out = torch.empty_like(rewards)
    rows = max(1, _CHUNK_ELEMENTS // max(T, 1))
    for s in range(0, bs, rows):
        out[s : s + rows] = _discounted_block(rewards[s : s + rows], mask[s : s + rows], gamma)
    return out


def _discounted_block(rewards: torch.Tensor, mask: torch.Tensor, gamma: float) -> torch.Tensor:
    T = rewards.shape[1]
    pos = torch.arange(T, device=rewards.device)
    valid = mask.bool()
    lengths = valid.sum(-1)
    right_padded = torch.equal(valid, pos < lengths.unsqueeze(-1))
    if right_padded and gamma == 1.0:
        # usual case: G_t = sum of r over [t, L) for valid t, and r_t on padding = total - C_t + r_t
        csum = torch.cumsum(rewards * mask, dim=-1)
        return torch.sub(csum[:, -1:], csum).add_(rewards)
    x = rewards.double()
    scale = gamma ** pos.double() if gamma != 1.0 else None
    if scale is not None:
        x = x * scale
    csum = torch.cumsum(x, dim=-1)
    if right_padded:
        # every valid t chains to the last valid token; padding keeps r_t
        end = csum.gather(1, (lengths - 1).clamp(min=0).unsqueeze(-1))
        out = end - csum + x
        if scale is not None:
            out = out / scale
        return torch.where(valid, out, rewards.double()).to(rewards.dtype)
    # general mask (e.g. multi-turn): e(t) = min{j > t : m_j == 0} via a reverse running minimum
    cut = torch.where(valid, T, pos)
    cut = torch.cat([cut[:, 1:], torch.full_like(cut[:, :1], T)], dim=-1)
    first_cut = torch.flip(torch.cummin(torch.flip(cut, [-1]), -1).values, [-1])
    out = csum.gather(1, first_cut - 1) - csum + x
    if scale is not None:
        out = out / scale
    return out.to(rewards.dtype)


@register_adv_est(AdvantageEstimator.REINFORCE_PLUS_PLUS)
def compute_reinforce_plus_plus_outcome_advantage(
    token_level_rewards: torch.Tensor, response_mask: torch.Tensor, config: Any = None, **kwargs
) -> tuple[torch.Tensor, torch.Tensor]:
    """REINFORCE++: discounted returns (``config.gamma``), advantages = batch-whitened returns.

    token_level_rewards, response_mask: ``(bs, response_length)``. Returns ``(advantages, returns)``.
    """
    assert config is not None, "reinforce_plus_plus needs the algorithm config (for gamma)"
    _check_shapes(token_level_rewards=token_level_rewards, response_mask=response_mask)
    gamma = AlgoConfig.from_config(config).gamma
    with torch.no_grad():
        returns = _discounted_returns(token_level_rewards, response_mask, gamma)
        advantages = verl_F.masked_whiten(returns, response_mask).mul_(response_mask)
    return advantages, returns


@register_adv_est(AdvantageEstimator.REINFORCE_PLUS_PLUS_BASELINE)
def compute_reinforce_plus_plus_baseline_outcome_advantage(
    token_level_rewards: torch.Tensor,
    response_mask: torch.Tensor,
    index: np.ndarray,
    epsilon: float = 1e-6,
    config: Any = None,
    **kwargs,
) -> tuple[torch.Tensor, torch.Tensor]:
    """REINFORCE++ with a group-mean baseline: ``s_i - mean_group`` over tokens, then batch-whitened.

    token_level_rewards, response_mask: ``(bs, response_length)``; index: ``(bs,)`` group ids.
    """
    _check_shapes(token_level_rewards=token_level_rewards, response_mask=response_mask)
    with torch.no_grad():
        scores = token_level_rewards.sum(dim=-1)
        g = _Groups(scores, index)
        mean = torch.where(g.count == 1, torch.zeros_like(g.mean), g.mean)
        adv = _outcome(scores.double() - g.per_row(mean), token_level_rewards, response_mask)
        advantages = verl_F.masked_whiten(adv, response_mask).mul_(response_mask)
    return advantages, advantages


@register_adv_est(AdvantageEstimator.REMAX)
def compute_remax_outcome_advantage(
    token_level_rewards: torch.Tensor,
    reward_baselines: torch.Tensor,
    response_mask: torch.Tensor,
    config: Any = None,
    **kwargs,
) -> tuple[torch.Tensor, torch.Tensor]:
    """ReMax: reward-to-go minus the greedy response's reward. rewards, mask ``(bs, T)``; baselines ``(bs,)``."""
    _check_shapes(token_level_rewards=token_level_rewards, response_mask=response_mask)
    if reward_baselines.shape != token_level_rewards.shape[:1]:
        raise ValueError(
            f"reward_baselines must be (bs,) = {tuple(token_level_rewards.shape[:1])}, "
            f"got {tuple(reward_baselines.shape)}"
        )
    with torch.no_grad():
        returns = torch.flip(torch.cumsum(torch.flip(token_level_rewards * response_mask, [-1]), -1), [-1])
        advantages = returns - reward_baselines.unsqueeze(-1) * response_mask
    return advantages, returns


@register_adv_est(AdvantageEstimator.RLOO)
def compute_rloo_outcome_advantage(
    token_level_rewards: torch.Tensor,
    response_mask: torch.Tensor,
    index: np.ndarray,
    epsilon: float = 1e-6,
    config: Any = None,
    **kwargs,
) -> tuple[torch.Tensor, torch.Tensor]:
    """RLOO: ``s_i`` minus the mean of the other samples of its group (``s_i`` alone in a group of one).

    token_level_rewards, response_mask: ``(bs, response_length)``; index: ``(bs,)`` group ids.
    """
    _check_shapes(token_level_rewards=token_level_rewards, response_mask=response_mask)
    with torch.no_grad():
        scores = token_level_rewards.sum(dim=-1)
        g = _Groups(scores, index)
        n = g.per_row(g.count)
        s = scores.double()
        loo = torch.where(n > 1, s * n / (n - 1).clamp(min=1) - g.per_row(g.mean) * n / (n - 1).clamp(min=1), s)
        advantages = _outcome(loo, token_level_rewards, response_mask)
    return advantages, advantages


@register_adv_est(AdvantageEstimator.OPO)
def compute_opo_outcome_advantage(
    token_level_rewards: torch.Tensor,
    response_mask: torch.Tensor,
    index: np.ndarray,
    epsilon: float = 1e-6,
    config: Any = None,
    **kwargs,
) -> tuple[torch.Tensor, torch.Tensor]:
    """OPO: ``s_i`` minus the response-length-weighted mean score of its group (0 for a group of one).

    token_level_rewards, response_mask: ``(bs, response_length)``; index: ``(bs,)`` group ids.
    """
    _check_shapes(token_level_rewards=token_level_rewards, response_mask=response_mask)
    with torch.no_grad():
        scores = token_level_rewards.sum(dim=-1)
        g = _Groups(scores, index)
        lengths = response_mask.sum(dim=-1).double()
        s = scores.double()
        weighted = torch.zeros_like(g.mean).index_add_(0, g.ids, lengths * s)
        total_len = torch.zeros_like(g.mean).index_add_(0, g.ids, lengths)
        baseline = torch.where(g.count > 1, weighted / total_len.clamp(min=1e-12), torch.zeros_like(weighted))
        advantages = _outcome(s - g.per_row(baseline), token_level_rewards, response_mask)
    return advantages, advantages


@register_adv_est(AdvantageEstimator.GPG)
def compute_gpg_outcome_advantage(
    token_level_rewards: torch.Tensor,
    response_mask: torch.Tensor,
    index: np.ndarray,
    epsilon: float = 1e-6,
    f_norm: float = 1.0,
    config: Any = None,
    **kwargs,
) -> tuple[torch.Tensor, torch.Tensor]:
    """GPG (Group Policy Gradient): ``alpha * (s_i - mean_group) / f_norm`` with ``alpha = bs / #{j: s_j != 0}``.

    token_level_rewards, response_mask: ``(bs, response_length)``; index: ``(bs,)`` group ids. No division by the
    group's std; a group of one uses mean 0. ``alpha`` (the paper's gradient correction ``B / (B - M)``) is computed
    from the batch as verl does, with the responses that score non-zero as ``B - M``; a caller's ``alpha`` keyword
    is ignored, as in verl, and ``epsilon`` is unused (kept for the common signature). Pair with
    ``policy_loss.loss_mode=gpg``.
    """
    _check_shapes(token_level_rewards=token_level_rewards, response_mask=response_mask)
    with torch.no_grad():
        scores = token_level_rewards.sum(dim=-1)
        g = _Groups(scores, index)
        mean = torch.where(g.count == 1, torch.zeros_like(g.mean), g.mean)
        alpha = scores.shape[0] / max(int(torch.count_nonzero(scores)), 1)
        adv = alpha * (scores.double() - g.per_row(mean)) / f_norm
        advantages = _outcome(adv, token_level_rewards, response_mask)
    return advantages, advantages


# ==========================================================================================================
# PF-PPO
# ==========================================================================================================
def compute_pf_ppo_reweight_data(data, reweight_method: str = "pow", weight_pow: float = 2.0):
    """Policy-filtration PPO: resample the batch (with replacement) by score-derived weights.

    Weights from ``token_level_scores.sum(-1)``: ``pow`` -> ``|s|^p``; ``max_min`` -> 1 at max/min else 0;
    ``max_random`` -> 0.4 at max else 0.1. Every tensor, non-tensor array and per-sample meta_info list is
    resampled; returns a new DataProto of the same size.
    """
    scores = data.batch["token_level_scores"].sum(dim=-1)
    if reweight_method == "pow":
        weights = scores.abs().pow(weight_pow)
    elif reweight_method == "max_min":
        weights = ((scores == scores.max()) | (scores == scores.min())).float()
    elif reweight_method == "max_random":
        weights = torch.where(scores == scores.max(), 0.4, 0.1)
    else:
        raise ValueError(
            f"Unknown pf_ppo_reweight_method {reweight_method!r}; expected 'pow', 'max_min' or 'max_random'"
        )
    weights = torch.clamp(weights.float() + 1e-8, min=1e-8)
    bs = scores.shape[0]
    idx = torch.multinomial(weights, bs, replacement=True)
    idx_np = idx.cpu().numpy()
    batch = data.batch[idx]
    non_tensor = {
        k: (v[idx_np] if isinstance(v, np.ndarray) and len(v) == bs else copy.deepcopy(v))
        for k, v in data.non_tensor_batch.items()
    }
    meta = {
        k: ([v[i] for i in idx_np] if isinstance(v, list) and len(v) == bs else copy.deepcopy(v))
        for k, v in data.meta_info.items()
    }
    return type(data)(batch=batch.clone(), non_tensor_batch=non_tensor, meta_info=copy.deepcopy(meta))


# ==========================================================================================================
# Trainer-side steps on a DataProto: response mask, in-reward KL penalty, advantage dispatch
# (``verl.trainer.ppo.ray_trainer`` re-exports them under verl's names; recipes import them from there)
# ==========================================================================================================
def compute_response_mask(data: DataProto) -> torch.Tensor:
    """``attention_mask`` over the response columns ``(bs, response_length)``."""
    response_length = data.batch["responses"].size(1)
    return data.batch["attention_mask"][:, -response_length:]


# inside apply_kl_penalty its argument ``kl_penalty`` (verl's name for the estimator) hides the function
_kl_penalty = kl_penalty


def apply_kl_penalty(data: DataProto, kl_ctrl, kl_penalty: str = "kl", multi_turn: bool = False):
    """``token_level_rewards = token_level_scores - beta * KL(old || ref)``; updates the controller."""
    response_length = data.batch["responses"].size(1)
    if multi_turn:
        mask = data.batch["loss_mask"][:, -response_length:]
    else:
        mask = data.batch["attention_mask"][:, -response_length:]
    kld = _kl_penalty(data.batch["old_log_probs"], data.batch["ref_log_prob"], kl_penalty=kl_penalty) * mask
    beta = kl_ctrl.value
    data.batch["token_level_rewards"] = data.batch["token_level_scores"] - beta * kld
    current_kl = torch.mean(verl_F.masked_mean(kld, mask=mask, axis=-1)).item()
    kl_ctrl.update(current_kl=current_kl, n_steps=len(data))
    return data, {"actor/reward_kl_penalty": current_kl, "actor/reward_kl_penalty_coeff": beta}


def _accepts(fn, name: str) -> bool:
    """Whether ``fn`` takes a keyword argument ``name`` (named, or through ``**kwargs``)."""
    params = inspect.signature(fn).parameters
    return name in params or any(p.kind is inspect.Parameter.VAR_KEYWORD for p in params.values())


def compute_advantage(
    data: DataProto,
    adv_estimator,
    gamma: float = 1.0,
    lam: float = 1.0,
    num_repeat: int = 1,
    multi_turn: bool = False,
    norm_adv_by_std_in_grpo: bool = True,
    config=None,
) -> DataProto:
    """Write ``advantages`` and ``returns`` ``(bs, response_length)`` with the estimator registered as
    ``adv_estimator``; preference-feedback reweighting follows GAE when ``config.use_pf_ppo``.

    Every estimator gets the inputs its signature asks for: ``token_level_rewards``, ``response_mask`` (the
    ``loss_mask`` in multi-turn, so tool output earns no advantage), ``values``, ``index`` (group uids),
    ``reward_baselines``, ``gamma``, ``lam``, ``norm_adv_by_std_in_grpo`` and ``config`` (the algorithm section).
    """
    if "response_mask" not in data.batch.keys():
        data.batch["response_mask"] = compute_response_mask(data)
    response_mask = data.batch["response_mask"]
    if multi_turn:
        response_mask = data.batch["loss_mask"][:, -response_mask.shape[1] :]
    algorithm = AlgoConfig.from_config(config if config is not None else {})
    estimator = get_adv_estimator_fn(adv_estimator)
    inputs = {
        "token_level_rewards": data.batch["token_level_rewards"],
        "response_mask": response_mask,
        "gamma": gamma,
        "lam": lam,
        "norm_adv_by_std_in_grpo": norm_adv_by_std_in_grpo,
        "config": algorithm,
    }
    optional = {"values": data.batch, "reward_baselines": data.batch}
    for key, source in optional.items():
        if key in source.keys():
            inputs[key] = source[key]
    if "uid" in data.non_tensor_batch:
        inputs["index"] = data.non_tensor_batch["uid"]
    advantages, returns = estimator(**{k: v for k, v in inputs.items() if _accepts(estimator, k)})
    data.batch["advantages"], data.batch["returns"] = advantages, returns
    if adv_estimator == AdvantageEstimator.GAE and algorithm.use_pf_ppo:
        pf = algorithm.pf_ppo
        data = compute_pf_ppo_reweight_data(data, pf.reweight_method, pf.weight_pow)
    return data
