"""Rollout correction (``algorithm.rollout_correction``, verl >= 0.6; verl's module path): importance-sampling
weights and rejection masks for the gap between the policy that sampled (the rollout engine, ``rollout_log_probs``)
and the policy the update treats as old (``old_log_probs``).

Everything here is a pure function of ``(bs, response_length)`` tensors, so the driver calls it once per batch
(decoupled mode: ``log r = old_log_probs - rollout_log_probs``) and the actor's loss calls it per micro batch
(bypass mode: ``log r = log_prob.detach() - rollout_log_probs``). ``docs/rollout_correction.md`` has the formulas.
:func:`rollout_correction` returns the weights as a tensor; :func:`compute_rollout_correction_and_rejection_mask`
is verl's call, which wraps them in a ``DataProto``.

* IS weights (``rollout_is``): ``token`` gives ``w_t = r_t``; ``sequence`` gives every token of sequence i
  ``w_i = prod_t r_t``. Ratios are kept in ``[e^-20, e^20]`` so nothing overflows; then truncated at
  ``rollout_is_threshold`` (TIS) or, for a ``"lower_upper"`` threshold, zeroed outside ``[lower, upper]`` (IcePop);
  zero on padding; optionally divided by their batch mean (``rollout_is_batch_normalize``).
* Rejection (``rollout_rs``, comma-separated options): a token or whole sequence whose statistic falls outside its
  bounds leaves the response mask. ``k1`` statistics are ratios with ``lower_upper`` bounds (a single float ``u``
  means ``[1/u, u]``): ``token_k1`` (``r_t``), ``seq_sum_k1`` (``prod_t r_t``), ``seq_mean_k1`` (the geometric mean
  ``exp(mean_t log r_t)``). ``k2 = 0.5 (log r)^2`` and ``k3 = r - 1 - log r`` have an upper bound only:
  ``token_k2/k3``, ``seq_sum_k2/k3``, ``seq_mean_k2/k3``, ``seq_max_k2/k3``. verl 0.6/0.7.0's level names are
  accepted: ``token`` = ``token_k1``, ``sequence`` = ``seq_sum_k1``, ``geometric`` = ``seq_mean_k1``, and so is
  0.7.0's ``rollout_rs_threshold_lower``, the lower ratio bound of a k1 option given a single upper bound.
* Veto (``rollout_token_veto_threshold``, verl 0.7.0): a sequence with any token whose ratio is below the threshold
  leaves the response mask whole.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import torch

from verl.protocol import DataProto

__all__ = [
    "RS_OPTIONS",
    "compute_offpolicy_metrics",
    "compute_rollout_correction_and_rejection_mask",
    "compute_token_version_metrics",
    "correction_enabled",
    "parse_is_threshold",
    "parse_rs_spec",
    "parse_veto_threshold",
    "rejection_enabled",
    "rollout_correction",
    "rollout_correction_kwargs",
]

# log-ratios are clamped here before exp(): e^20 ~ 5e8 is far beyond any threshold and finite in fp32
SAFETY_BOUND = 20.0
IS_LEVELS = ("token", "sequence")
RS_OPTIONS = (
    "token_k1",
    "token_k2",
    "token_k3",
    "seq_sum_k1",
    "seq_sum_k2",
    "seq_sum_k3",
    "seq_mean_k1",
    "seq_mean_k2",
    "seq_mean_k3",
    "seq_max_k2",
    "seq_max_k3",
)
RS_ALIASES = {"token": "token_k1", "sequence": "seq_sum_k1", "geometric": "seq_mean_k1"}
METRIC_PREFIX = "rollout_corr/"


@dataclass(frozen=True)
class RejectionRule:
    """One ``rollout_rs`` option with its bounds; ``lower`` is None for the upper-bound-only k2/k3 statistics."""

    option: str
    lower: float | None
    upper: float


def _cfg(config: Any, key: str, default=None):
    if config is None:
        return default
    if isinstance(config, Mapping):
        return config.get(key, default)
    return getattr(config, key, default)


def rejection_enabled(config: Any) -> bool:
    """Whether ``algorithm.rollout_correction`` takes tokens out of the response mask (rejection or the veto)."""
    return bool(_cfg(config, "rollout_rs")) or _cfg(config, "rollout_token_veto_threshold") is not None


def correction_enabled(config: Any) -> bool:
    """Whether ``algorithm.rollout_correction`` changes anything (IS weights, rejection, the veto or bypass mode)."""
    return bool(_cfg(config, "rollout_is") or rejection_enabled(config) or _cfg(config, "bypass_mode", False))


def _parse_bounds(text: str, key: str) -> tuple[float, float]:
    lower_text, sep, upper_text = text.partition("_")
    try:
        lower, upper = float(lower_text), float(upper_text)
    except ValueError:
        raise ValueError(f"{key}={text!r}: expected a number or 'lower_upper' such as '0.5_2.0'") from None
    if not (0 <= lower < upper) or not math.isfinite(upper):
        raise ValueError(f"{key}={text!r}: the bounds need 0 <= lower < upper (finite), e.g. '0.5_2.0'")
    return lower, upper


def parse_is_threshold(threshold: Any) -> tuple[float | None, float]:
    """``rollout_is_threshold`` as ``(lower, upper)``: ``(None, u)`` truncates at u (TIS), ``(l, u)`` from
    ``"l_u"`` zeroes weights outside ``[l, u]`` (IcePop). ValueError on anything else."""
    key = "algorithm.rollout_correction.rollout_is_threshold"
    if isinstance(threshold, str) and "_" in threshold:
        return _parse_bounds(threshold, key)
    try:
        upper = float(threshold)
    except (TypeError, ValueError):
        raise ValueError(
            f"{key}={threshold!r}: expected a number > 0 (e.g. 2.0) or 'lower_upper' (e.g. '0.5_5.0')"
        ) from None
    if not (upper > 0 and math.isfinite(upper)):
        raise ValueError(f"{key}={threshold!r}: the truncation threshold must be a finite number > 0 (e.g. 2.0)")
    return None, upper


def _number(value: Any) -> float:
    """``value`` as a float, NaN when it is not a number (booleans included), so one range test refuses both."""
    if isinstance(value, bool):
        return math.nan
    try:
        return float(value)
    except (TypeError, ValueError):
        return math.nan


def _parse_rs_lower(rollout_rs: Any, options: list[str], entries: list[str], lower: Any) -> float | None:
    """verl 0.7.0's ``rollout_rs_threshold_lower`` (None when unset), checked against the options it bounds."""
    if lower is None:
        return None
    key = "algorithm.rollout_correction.rollout_rs_threshold_lower"
    value = _number(lower)
    if not (value >= 0 and math.isfinite(value)):
        raise ValueError(f"{key}={lower!r}: expected a number >= 0 (the lower ratio bound), or null")
    k1 = [(o, e) for o, e in zip(options, entries) if o.endswith("k1")]
    if not k1:
        raise ValueError(
            f"{key}={lower!r} bounds ratios from below, but algorithm.rollout_correction.rollout_rs={rollout_rs!r} "
            "has no k1 option (k2/k3 take an upper bound only); set it to null"
        )
    both = [o for o, e in k1 if "_" in e]
    if both:
        raise ValueError(
            f"{key}={lower!r} and a 'lower_upper' rollout_rs_threshold for {both} give two lower bounds; give one "
            "(verl >= 0.7.1 spells it rollout_rs_threshold='lower_upper')"
        )
    return value


def parse_rs_spec(
    rollout_rs: Any, rollout_rs_threshold: Any, rollout_rs_threshold_lower: Any = None
) -> list[RejectionRule]:
    """``rollout_rs`` (comma-separated options) and ``rollout_rs_threshold`` (one entry per option, or one for
    all) as rules; ``[]`` when ``rollout_rs`` is null. ValueError naming the key on anything invalid.

    ``rollout_rs_threshold_lower`` is verl 0.7.0's lower ratio bound: it replaces the ``1/u`` of every k1 option
    given a single bound ``u``, as ``"lower_u"`` would (verl 0.7.1 folded the key into that spelling).
    """
    if not rollout_rs:
        return []
    key_rs, key_th = "algorithm.rollout_correction.rollout_rs", "algorithm.rollout_correction.rollout_rs_threshold"
    # a repeated option counts once (verl drops duplicates before matching thresholds to options)
    options = list(dict.fromkeys(RS_ALIASES.get(o.strip(), o.strip()) for o in str(rollout_rs).split(",") if o.strip()))
    for option in options:
        if option not in RS_OPTIONS:
            raise ValueError(
                f"{key_rs}={rollout_rs!r}: unknown option {option!r}; expected comma-separated options from "
                f"{list(RS_OPTIONS)} (or verl 0.6's {list(RS_ALIASES)})"
            )
    if rollout_rs_threshold is None:
        raise ValueError(f"{key_rs}={rollout_rs!r} needs {key_th} (e.g. '0.5_2.0' for k1 options, 0.01 for k2/k3)")
    entries = [t.strip() for t in str(rollout_rs_threshold).split(",")]
    if len(entries) == 1:
        entries = entries * len(options)
    if len(entries) != len(options):
        raise ValueError(
            f"{key_th}={rollout_rs_threshold!r} has {len(entries)} entries for {len(options)} options in "
            f"{key_rs}={rollout_rs!r}: give one entry per option, or one for all"
        )
    given_lower = _parse_rs_lower(rollout_rs, options, entries, rollout_rs_threshold_lower)
    rules = []
    for option, entry in zip(options, entries):
        if option.endswith("k1"):
            if "_" in entry:
                lower, upper = _parse_bounds(entry, key_th)
            elif given_lower is not None:
                lower, upper = given_lower, _number(entry)
                if not (lower < upper and math.isfinite(upper)):
                    raise ValueError(
                        f"{key_th}={rollout_rs_threshold!r} with algorithm.rollout_correction.rollout_rs_threshold_"
                        f"lower={rollout_rs_threshold_lower!r}: {option} needs lower < upper (finite)"
                    )
            else:
                _, upper = parse_is_threshold(entry)
                if upper <= 1:
                    raise ValueError(
                        f"{key_th}={rollout_rs_threshold!r}: a single bound u for {option} means [1/u, u], so it "
                        "must be > 1 (e.g. 2.0); give 'lower_upper' for other bounds"
                    )
                lower = 1.0 / upper
            rules.append(RejectionRule(option, lower, upper))
        else:
            try:
                upper = float(entry)
            except ValueError:
                raise ValueError(
                    f"{key_th}={rollout_rs_threshold!r}: {option} takes one upper bound (a number > 0), got {entry!r}"
                ) from None
            if not (upper > 0 and math.isfinite(upper)):
                raise ValueError(f"{key_th}={rollout_rs_threshold!r}: the bound of {option} must be a number > 0")
            rules.append(RejectionRule(option, None, upper))
    return rules


def parse_veto_threshold(threshold: Any) -> float | None:
    """verl 0.7.0's ``rollout_token_veto_threshold`` as a float (None when unset); ValueError unless a number > 0."""
    if threshold is None:
        return None
    key = "algorithm.rollout_correction.rollout_token_veto_threshold"
    value = _number(threshold)
    if not (value > 0 and math.isfinite(value)):
        raise ValueError(f"{key}={threshold!r}: expected a ratio > 0 (e.g. 1e-4), or null to switch the veto off")
    return value


def _masked_mean(values: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    return (values * mask).sum() / mask.sum().clamp(min=1)


def _masked_std(values: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    mean = _masked_mean(values, mask)
    count = mask.sum()
    if count < 2:
        return torch.zeros((), dtype=values.dtype, device=values.device)
    return torch.sqrt(((values - mean) ** 2 * mask).sum() / (count - 1))


def _sequence_log_ratio(log_ratio: torch.Tensor, mask: torch.Tensor, how: str) -> torch.Tensor:
    """Per-sequence aggregate of the masked log-ratio: ``sum``, ``mean`` over valid tokens, ``(bs,)``."""
    total = (log_ratio * mask).sum(dim=-1)
    if how == "sum":
        return total
    return total / mask.sum(dim=-1).clamp(min=1)


def _k3(log_ratio: torch.Tensor) -> torch.Tensor:
    """``r - 1 - log r`` per token (>= 0), with ``expm1`` so that it does not cancel to negative values near r = 1."""
    return (torch.expm1(log_ratio) - log_ratio).clamp(min=0)


def _rejection_keep(rule: RejectionRule, log_ratio: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """1 where ``rule`` keeps the token (sequence options: every token of a kept sequence), ``(bs, T)``."""
    level, _, estimator = rule.option.rpartition("_")
    if estimator == "k1":
        # ratios compared in log space: no overflow, and exact at the bounds
        upper = math.log(rule.upper)
        lower = math.log(rule.lower) if rule.lower > 0 else -math.inf
        stat = log_ratio if level == "token" else _sequence_log_ratio(log_ratio, mask, level.split("_")[1])
        keep = (stat >= lower) & (stat <= upper)
    else:
        bounded = log_ratio.clamp(-SAFETY_BOUND, SAFETY_BOUND)
        per_token = 0.5 * bounded**2 if estimator == "k2" else _k3(bounded)
        if level == "token":
            stat = per_token
        elif level == "seq_max":
            stat = (per_token * mask).max(dim=-1).values
        else:
            stat = _sequence_log_ratio(per_token, mask, level.split("_")[1])
        keep = stat <= rule.upper
    if keep.dim() == 1:
        keep = keep.unsqueeze(-1).expand_as(log_ratio)
    return keep.to(mask.dtype)


def compute_offpolicy_metrics(
    old_log_prob: torch.Tensor, rollout_log_prob: torch.Tensor, response_mask: torch.Tensor
) -> dict[str, float]:
    """How far the rollout policy is from the training one, over the valid tokens; keys ``rollout_corr/...``.

    ``kl`` = mean(rollout - old) (k1 estimate of KL(rollout || old)), ``k3_kl`` = mean(r - 1 - log r),
    ``chi2_token`` = mean(r^2) - 1, ``chi2_seq`` = mean_i(prod_t r_t^2) - 1, per-sequence perplexities
    (``training_ppl``, ``rollout_ppl`` and their logs), ``log_ppl_diff`` (rollout - training) with its abs / max / min,
    ``ppl_ratio`` = exp(mean_i(log_ppl_training - log_ppl_rollout)). All tensors ``(bs, response_length)``.
    """
    # float64: the gaps measured are often ~1e-8 per token, below float32's resolution of log-probs
    old, rollout = old_log_prob.detach().double(), rollout_log_prob.detach().double()
    mask = response_mask.double()
    log_ratio = ((old - rollout) * mask).clamp(-SAFETY_BOUND, SAFETY_BOUND)
    ratio = torch.exp(log_ratio)
    has_tokens = mask.sum(dim=-1) > 0
    seq_mask = has_tokens.float()
    lengths = mask.sum(dim=-1).clamp(min=1)
    training_log_ppl = -(old * mask).sum(dim=-1) / lengths
    rollout_log_ppl = -(rollout * mask).sum(dim=-1) / lengths
    log_ppl_diff = rollout_log_ppl - training_log_ppl
    seq_log_ratio_sq = (2 * (log_ratio * mask).sum(dim=-1)).clamp(-SAFETY_BOUND, SAFETY_BOUND)
    valid_diff = log_ppl_diff[has_tokens] if has_tokens.any() else log_ppl_diff.new_zeros(1)
    metrics = {
        "kl": _masked_mean(rollout - old, mask),
        "k3_kl": _masked_mean(_k3(log_ratio), mask),
        "chi2_token": _masked_mean(ratio**2, mask) - 1,
        "chi2_seq": _masked_mean(torch.exp(seq_log_ratio_sq), seq_mask) - 1,
        "training_log_ppl": _masked_mean(training_log_ppl, seq_mask),
        "rollout_log_ppl": _masked_mean(rollout_log_ppl, seq_mask),
        "training_ppl": _masked_mean(torch.exp(training_log_ppl), seq_mask),
        "rollout_ppl": _masked_mean(torch.exp(rollout_log_ppl), seq_mask),
        "log_ppl_diff": _masked_mean(log_ppl_diff, seq_mask),
        "log_ppl_abs_diff": _masked_mean(log_ppl_diff.abs(), seq_mask),
        "log_ppl_diff_max": valid_diff.max(),
        "log_ppl_diff_min": valid_diff.min(),
        "ppl_ratio": torch.exp(_masked_mean(-log_ppl_diff, seq_mask)),
    }
    return {METRIC_PREFIX + k: float(v) for k, v in metrics.items()}


def compute_token_version_metrics(
    weight_versions: torch.Tensor, actor_version: int, response_mask: torch.Tensor
) -> dict[str, float]:
    """How stale each trained token is (partial rollout: a response's tokens may come from several weight versions);
    keys ``rollout_corr/token_staleness_{mean,max}``, ``rollout_corr/mixed_version_seq_fraction`` (responses whose
    tokens span more than one version) and ``rollout_corr/token_version_min``.

    ``weight_versions`` ``(bs, response_length)``: the version that sampled each token, -1 where none was sampled
    (tool and template tokens, padding); ``response_mask`` ``(bs, response_length)``. Bypass mode's ratio is taken
    against each token's own rollout log-prob, so the correction is per token whatever version sampled it.
    """
    sampled = response_mask.bool() & (weight_versions >= 0)
    if not sampled.any():
        return {}
    versions = weight_versions.long()
    staleness = (actor_version - versions).double()
    big = torch.iinfo(torch.long).max
    newest = torch.where(sampled, versions, -1).max(dim=-1).values
    oldest = torch.where(sampled, versions, big).min(dim=-1).values
    has_tokens = sampled.any(dim=-1)
    mixed = (newest > oldest) & has_tokens
    return {
        METRIC_PREFIX + "token_staleness_mean": float(_masked_mean(staleness, sampled.double())),
        METRIC_PREFIX + "token_staleness_max": float(staleness[sampled].max()),
        METRIC_PREFIX + "token_version_min": float(versions[sampled].min()),
        METRIC_PREFIX + "mixed_version_seq_fraction": float(mixed.sum() / has_tokens.sum()),
    }


def _is_weights(
    log_ratio: torch.Tensor,
    mask: torch.Tensor,
    level: str,
    threshold: Any,
    batch_normalize: bool,
    metrics: dict,
) -> torch.Tensor:
    """IS weights ``(bs, T)`` (zero on padding) and their statistics into ``metrics``."""
    lower, upper = parse_is_threshold(threshold)
    if level == "token":
        raw_log = log_ratio
        units_mask = mask
    elif level == "sequence":
        raw_log = _sequence_log_ratio(log_ratio, mask, "sum")  # (bs,)
        units_mask = (mask.sum(dim=-1) > 0).to(mask.dtype)
    else:
        key = "algorithm.rollout_correction.rollout_is"
        raise ValueError(f"{key}={level!r}: expected one of {list(IS_LEVELS)} or null")
    raw = torch.exp(raw_log.clamp(-SAFETY_BOUND, SAFETY_BOUND))
    if lower is None:
        weights = raw.clamp(max=upper)
        low_bound = 1.0 / upper
    else:
        weights = torch.where((raw >= lower) & (raw <= upper), raw, torch.zeros_like(raw))
        low_bound = lower
    if batch_normalize:
        weights = weights / _masked_mean(weights, units_mask).clamp(min=1e-12)
    # statistics per unit (token, or sequence); min/max/fractions before truncation, so they show what was cut
    metrics["rollout_is_mean"] = _masked_mean(weights, units_mask)
    metrics["rollout_is_std"] = _masked_std(weights, units_mask)
    valid = units_mask.bool()
    metrics["rollout_is_min"] = raw[valid].min() if valid.any() else raw.new_tensor(1.0)
    metrics["rollout_is_max"] = raw[valid].max() if valid.any() else raw.new_tensor(1.0)
    mean_w = _masked_mean(weights, units_mask).clamp(min=1e-12)
    metrics["rollout_is_eff_sample_size"] = 1.0 / _masked_mean((weights / mean_w) ** 2, units_mask).clamp(min=1e-12)
    metrics["rollout_is_ratio_fraction_high"] = _masked_mean((raw > upper).to(mask.dtype), units_mask)
    metrics["rollout_is_ratio_fraction_low"] = _masked_mean((raw < low_bound).to(mask.dtype), units_mask)
    if level == "sequence":
        metrics["rollout_is_seq_mean"] = metrics["rollout_is_mean"]
        metrics["rollout_is_seq_std"] = metrics["rollout_is_std"]
        metrics["rollout_is_seq_min"] = metrics["rollout_is_min"]
        metrics["rollout_is_seq_max"] = metrics["rollout_is_max"]
        deviation = (raw - 1).abs()
        metrics["rollout_is_seq_max_deviation"] = deviation[valid].max() if valid.any() else raw.new_tensor(0.0)
        metrics["rollout_is_seq_fraction_high"] = metrics["rollout_is_ratio_fraction_high"]
        metrics["rollout_is_seq_fraction_low"] = metrics["rollout_is_ratio_fraction_low"]
        weights = weights.unsqueeze(-1).expand_as(log_ratio)
    return weights * mask


def rollout_correction(
    old_log_prob: torch.Tensor,
    rollout_log_prob: torch.Tensor,
    response_mask: torch.Tensor,
    rollout_is: str | None = None,
    rollout_is_threshold: float | str = 2.0,
    rollout_rs: str | None = None,
    rollout_rs_threshold: float | str | None = None,
    rollout_is_batch_normalize: bool = False,
    rollout_rs_threshold_lower: float | None = None,
    rollout_token_veto_threshold: float | None = None,
) -> tuple[torch.Tensor | None, torch.Tensor, dict[str, float]]:
    """IS weights, the response mask less the rejected tokens, and the ``rollout_corr/`` metrics.

    ``old_log_prob`` is the training policy's (``pi_old``, or ``pi_theta`` in bypass mode) and ``rollout_log_prob``
    the sampling engine's, both ``(bs, response_length)`` and used detached; ``response_mask`` ``(bs, T)`` marks
    the tokens that count. Returns ``(weights or None when rollout_is is null, modified_response_mask, metrics)``;
    weights are 0 on padding, the modified mask is ``response_mask`` times every rejection rule's keep mask and the
    veto's. ``rollout_rs_threshold_lower`` and ``rollout_token_veto_threshold`` are verl 0.7.0's keys (module doc).
    """
    mask = response_mask.to(torch.float32)
    log_ratio = (old_log_prob.detach().float() - rollout_log_prob.detach().float()) * mask
    metrics: dict = {}
    weights = None
    if rollout_is:
        weights = _is_weights(log_ratio, mask, rollout_is, rollout_is_threshold, rollout_is_batch_normalize, metrics)
    has_tokens = (mask.sum(dim=-1) > 0).to(mask.dtype)
    keep = torch.ones_like(mask)
    for rule in parse_rs_spec(rollout_rs, rollout_rs_threshold, rollout_rs_threshold_lower):
        rule_keep = _rejection_keep(rule, log_ratio, mask)
        metrics[f"rollout_rs_{rule.option}_masked_fraction"] = _masked_mean(1 - rule_keep, mask)
        keep = keep * rule_keep
    if rollout_rs:
        rejected = mask * (1 - keep)
        metrics["rollout_rs_masked_fraction"] = _masked_mean(rejected, mask)
        metrics["rollout_rs_seq_masked_fraction"] = _masked_mean((rejected.sum(dim=-1) > 0).to(mask.dtype), has_tokens)
    veto = parse_veto_threshold(rollout_token_veto_threshold)
    if veto is not None:
        # the raw log-ratio, not clamped: a ratio of 1e-30 is vetoed whatever the safety bound
        catastrophic = (log_ratio < math.log(veto)) & mask.bool()
        vetoed = catastrophic.any(dim=-1).to(mask.dtype)
        metrics["rollout_is_veto_fraction"] = _masked_mean(vetoed, has_tokens)
        metrics["rollout_is_catastrophic_token_fraction"] = _masked_mean(catastrophic.to(mask.dtype), mask)
        keep = keep * (1 - vetoed).unsqueeze(-1)
    modified = mask * keep
    out = {METRIC_PREFIX + k: float(v) for k, v in metrics.items()}
    out.update(compute_offpolicy_metrics(old_log_prob, rollout_log_prob, response_mask))
    return weights, modified.to(response_mask.dtype), out


def compute_rollout_correction_and_rejection_mask(
    old_log_prob: torch.Tensor, rollout_log_prob: torch.Tensor, response_mask: torch.Tensor, **options: Any
) -> tuple[DataProto | None, torch.Tensor, dict[str, float]]:
    """verl's entry point: :func:`rollout_correction` (same arguments, ``options`` its keywords) with the weights as
    a ``DataProto`` (``batch["rollout_is_weights"]``, ``(bs, response_length)``), or None when ``rollout_is`` is
    null; then the modified mask and the metrics."""
    weights, mask, metrics = rollout_correction(old_log_prob, rollout_log_prob, response_mask, **options)
    weights_proto = None if weights is None else DataProto.from_dict(tensors={"rollout_is_weights": weights})
    return weights_proto, mask, metrics


def rollout_correction_kwargs(config: Any) -> dict:
    """The keyword arguments of :func:`compute_rollout_correction_and_rejection_mask` from the config section
    (typed ``RolloutCorrectionConfig``, a dict, or None)."""
    return {
        "rollout_is": _cfg(config, "rollout_is"),
        "rollout_is_threshold": _cfg(config, "rollout_is_threshold", 2.0),
        "rollout_rs": _cfg(config, "rollout_rs"),
        "rollout_rs_threshold": _cfg(config, "rollout_rs_threshold"),
        "rollout_is_batch_normalize": bool(_cfg(config, "rollout_is_batch_normalize", False)),
        "rollout_rs_threshold_lower": _cfg(config, "rollout_rs_threshold_lower"),
        "rollout_token_veto_threshold": _cfg(config, "rollout_token_veto_threshold"),
    }
