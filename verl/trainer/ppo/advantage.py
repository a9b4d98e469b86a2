"""Data-level steps of a PPO step: the response mask, the in-reward KL penalty and the advantage dispatch.

`verl.trainer.ppo.ray_trainer` re-exports them under verl's names (recipes import them from there).
"""

from __future__ import annotations

import inspect

import torch

from verl import DataProto
from verl.trainer.config import AlgoConfig
from verl.trainer.ppo import core_algos
from verl.trainer.ppo.core_algos import AdvantageEstimator
from verl.utils.torch_functional import masked_mean

__all__ = ["apply_kl_penalty", "compute_advantage", "compute_response_mask"]


def compute_response_mask(data: DataProto) -> torch.Tensor:
    """``attention_mask`` over the response columns ``(bs, response_length)``."""
    response_length = data.batch["responses"].size(1)
    return data.batch["attention_mask"][:, -response_length:]


def apply_kl_penalty(data: DataProto, kl_ctrl, kl_penalty: str = "kl", multi_turn: bool = False):
    """``token_level_rewards = token_level_scores - beta * KL(old || ref)``; updates the controller."""
    response_length = data.batch["responses"].size(1)
    if multi_turn:
        mask = data.batch["loss_mask"][:, -response_length:]
    else:
        mask = data.batch["attention_mask"][:, -response_length:]
    kld = core_algos.kl_penalty(data.batch["old_log_probs"], data.batch["ref_log_prob"], kl_penalty=kl_penalty) * mask
    beta = kl_ctrl.value
    data.batch["token_level_rewards"] = data.batch["token_level_scores"] - beta * kld
    current_kl = torch.mean(masked_mean(kld, mask=mask, axis=-1)).item()
    kl_ctrl.update(current_kl=current_kl, n_steps=len(data))
    return data, {"actor/reward_kl_penalty": current_kl, "actor/reward_kl_penalty_coeff": beta}


def _accepts(fn, name: str) -> bool:
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
    estimator = core_algos.get_adv_estimator_fn(adv_estimator)
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
        data = core_algos.compute_pf_ppo_reweight_data(data, pf.reweight_method, pf.weight_pow)
    return data
