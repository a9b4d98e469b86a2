"""Trainer-level metrics: batch statistics, timing, throughput and bootstrapped validation metrics."""

from __future__ import annotations

import warnings
from collections import defaultdict
from collections.abc import Callable, Sequence
from functools import partial
from typing import Any

import numpy as np
import torch

from verl.utils.metric import reduce_metrics as _reduce_metrics


def reduce_metrics(metrics: dict[str, list[Any]]) -> dict[str, Any]:
    """Deprecated alias of :func:`verl.utils.metric.reduce_metrics`."""
    warnings.warn(
        "verl.trainer.ppo.metric_utils.reduce_metrics is deprecated; use verl.utils.metric.reduce_metrics",
        DeprecationWarning,
        stacklevel=2,
    )
    return _reduce_metrics(metrics)


def _compute_response_info(batch) -> dict[str, torch.Tensor]:
    """Prompt/response masks and lengths from ``attention_mask (bs, prompt+response)`` and ``responses``.

    Returns ``response_mask (bs, response_length)``, ``prompt_length (bs,)``, ``response_length (bs,)`` (float).
    """
    response_width = batch.batch["responses"].shape[-1]
    attention_mask = batch.batch["attention_mask"]
    prompt_mask = attention_mask[:, :-response_width]
    response_mask = attention_mask[:, -response_width:]
    return {
        "response_mask": response_mask,
        "prompt_length": prompt_mask.sum(-1).float(),
        "response_length": response_mask.sum(-1).float(),
    }


def _stats(prefix: str, values: torch.Tensor) -> dict[str, float]:
    values = values.detach().float()
    if values.numel() == 0:  # e.g. no valid response token at all: report nan rather than crash
        return {f"{prefix}/mean": float("nan"), f"{prefix}/max": float("nan"), f"{prefix}/min": float("nan")}
    return {
        f"{prefix}/mean": values.mean().item(),
        f"{prefix}/max": values.max().item(),
        f"{prefix}/min": values.min().item(),
    }


def compute_data_metrics(batch, use_critic: bool = True) -> dict[str, float]:
    """Score, reward, advantage, return, value and length statistics of a training batch (a DataProto).

    Reads ``token_level_scores``, ``token_level_rewards``, ``advantages``, ``returns`` (and ``values`` with a
    critic), all ``(bs, response_length)``, plus ``responses`` and ``attention_mask``.
    """
    scores = batch.batch["token_level_scores"].sum(-1)
    rewards = batch.batch["token_level_rewards"].sum(-1)
    advantages, returns = batch.batch["advantages"], batch.batch["returns"]
    response_width = batch.batch["responses"].shape[-1]
    attention_mask = batch.batch["attention_mask"]
    prompt_width = attention_mask.shape[-1] - response_width
    response_mask = attention_mask[:, -response_width:].bool()

    info = _compute_response_info(batch)
    prompt_length, response_length = info["prompt_length"], info["response_length"]
    valid_returns = torch.masked_select(returns, response_mask)

    metrics = {
        **_stats("critic/score", scores),
        **_stats("critic/rewards", rewards),
        **_stats("critic/advantages", torch.masked_select(advantages, response_mask)),
        **_stats("critic/returns", valid_returns),
    }
    if use_critic:
        valid_values = torch.masked_select(batch.batch["values"], response_mask)
        metrics.update(_stats("critic/values", valid_values))
        return_diff_var = torch.var(valid_returns.float() - valid_values.float())
        return_var = torch.var(valid_returns.float())
        metrics["critic/vf_explained_var"] = (1.0 - return_diff_var / (return_var + 1e-5)).item()
    metrics.update(_stats("response_length", response_length))
    metrics["response_length/clip_ratio"] = torch.eq(response_length, response_width).float().mean().item()
    metrics.update(_stats("prompt_length", prompt_length))
    metrics["prompt_length/clip_ratio"] = torch.eq(prompt_length, prompt_width).float().mean().item()
    return metrics


_PER_TOKEN_SECTIONS = ("gen", "ref", "values", "adv", "update_critic", "update_actor")


def compute_timing_metrics(batch, timing_raw: dict[str, float]) -> dict[str, float]:
    """``timing_s/{name}`` for every timed section and ``timing_per_token_ms/{name}`` for the per-token ones.

    ``gen`` is normalised by response tokens, the other sections by prompt + response tokens.
    """
    info = _compute_response_info(batch)
    num_response_tokens = torch.sum(info["response_length"]).item()
    num_overall_tokens = torch.sum(info["prompt_length"]).item() + num_response_tokens
    tokens = {name: num_overall_tokens for name in _PER_TOKEN_SECTIONS}
    tokens["gen"] = num_response_tokens
    metrics = {f"timing_s/{name}": value for name, value in timing_raw.items()}
    for name in _PER_TOKEN_SECTIONS:
        if name in timing_raw:
            metrics[f"timing_per_token_ms/{name}"] = timing_raw[name] * 1000 / tokens[name]
    return metrics


def compute_throughout_metrics(batch, timing_raw: dict[str, float], n_gpus: int) -> dict[str, float]:
    """Tokens per step and throughput (tokens / second / device) from ``meta_info["global_token_num"]``."""
    total_num_tokens = sum(batch.meta_info["global_token_num"])
    time = timing_raw["step"]
    return {
        "perf/total_num_tokens": total_num_tokens,
        "perf/time_per_step": time,
        "perf/throughput": total_num_tokens / (time * n_gpus),
    }


def bootstrap_metric(
    data: Sequence[Any],
    subset_size: int,
    reduce_fns: list[Callable[[list[Any]], float]],
    n_bootstrap: int = 1000,
    seed: int = 42,
) -> list[tuple[float, float]]:
    """Mean and std of each ``reduce_fn`` over ``n_bootstrap`` resamples (with replacement) of ``subset_size``."""
    if len(data) == 0:
        raise ValueError("bootstrap_metric needs non-empty data, got an empty sequence")
    np.random.seed(seed)
    # one draw of the whole index matrix consumes the generator exactly like n_bootstrap separate draws
    all_idxs = np.random.choice(len(data), size=(n_bootstrap, subset_size), replace=True)
    results: list[list[float]] = [[] for _ in reduce_fns]
    for idxs in all_idxs:
        sample = [data[i] for i in idxs]
        for out, fn in zip(results, reduce_fns):
            out.append(fn(sample))
    return [(float(np.mean(vals)), float(np.std(vals))) for vals in results]


def calc_maj_val(data: list[dict[str, Any]], vote_key: str, val_key: str) -> Any:
    """``val`` of the first sample voting for the most frequent ``vote`` (first seen wins ties)."""
    vote2vals: dict[Any, list[Any]] = defaultdict(list)
    for d in data:
        vote2vals[d[vote_key]].append(d[val_key])
    majority = max(vote2vals, key=lambda vote: len(vote2vals[vote]))
    return vote2vals[majority][0]


def _bootstrap_sizes(n: int) -> list[int]:
    sizes, k = [], 2
    while k < n:
        sizes.append(k)
        k *= 2
    return sizes + [n]


def _prompt_metrics(var_vals: list[Any], preds: list[Any] | None, seed: int) -> dict[str, float]:
    n = len(var_vals)
    metric = {f"mean@{n}": float(np.mean(var_vals))}
    if n <= 1:
        return metric
    metric[f"std@{n}"] = float(np.std(var_vals))
    for k in _bootstrap_sizes(n):
        (best_mean, best_std), (worst_mean, worst_std) = bootstrap_metric(var_vals, k, [np.max, np.min], seed=seed)
        metric[f"best@{k}/mean"], metric[f"best@{k}/std"] = best_mean, best_std
        metric[f"worst@{k}/mean"], metric[f"worst@{k}/std"] = worst_mean, worst_std
        if preds is not None:
            votes = [{"val": val, "pred": pred} for val, pred in zip(var_vals, preds)]
            maj = partial(calc_maj_val, vote_key="pred", val_key="val")
            [(maj_mean, maj_std)] = bootstrap_metric(votes, k, [maj], seed=seed)
            metric[f"maj@{k}/mean"], metric[f"maj@{k}/std"] = maj_mean, maj_std
    return metric


def process_validation_metrics(
    data_sources: list[str], sample_inputs: list[str], infos_dict: dict[str, list[Any]], seed: int = 42
) -> dict[str, dict[str, dict[str, float]]]:
    """Per data source, per variable: metrics (mean@n, std@n, best/worst/maj@k bootstraps) averaged over prompts.

    ``infos_dict[var]`` holds one value per sample; samples with the same prompt text are the n responses
    of that prompt. Variables whose values are strings (e.g. ``pred``) are only used for majority voting.
    """
    for var, vals in infos_dict.items():
        if len(vals) != len(data_sources):
            raise ValueError(f"infos_dict[{var!r}] has {len(vals)} values for {len(data_sources)} samples")

    def nested() -> defaultdict:
        return defaultdict(lambda: defaultdict(lambda: defaultdict(list)))

    grouped = nested()  # source -> prompt -> var -> values
    for i, (source, prompt) in enumerate(zip(data_sources, sample_inputs)):
        for var, vals in infos_dict.items():
            grouped[source][prompt][var].append(vals[i])

    per_prompt = nested()  # source -> var -> metric name -> one value per prompt
    for source, prompts in grouped.items():
        for var2vals in prompts.values():
            preds = var2vals.get("pred")
            for var, vals in var2vals.items():
                if isinstance(vals[0], str):
                    continue
                for name, value in _prompt_metrics(vals, preds, seed).items():
                    per_prompt[source][var][name].append(value)

    return {
        source: {var: {name: float(np.mean(v)) for name, v in metrics.items()} for var, metrics in var2metrics.items()}
        for source, var2metrics in per_prompt.items()
    }
