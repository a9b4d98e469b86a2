"""Checks of the roles' keys verl 0.9 added (actor, ref, critic and their engine and optimizer blocks) that the
runtime honours with conditions: two spellings of one setting set apart, the optimizer class, the learning-rate
schedule, the compute dtype, the critic's switch, the samples-per-prompt mirrors."""

from __future__ import annotations

import inspect

from verl.workers.config.aliases import alias_conflicts
from verl.workers.config.engine import precision_name

__all__ = ["check_role_keys"]

LR_SCHEDULERS = ("constant", "cosine")
FSDP_DTYPES = ("bf16", "fp16", "fp32")


def check_role_keys(config, *, use_critic: bool, use_ref: bool) -> list[str]:
    """One message per problem (``config``: the typed PPO config)."""
    arr, critic = config.actor_rollout_ref, config.critic
    problems = alias_conflicts(config)
    optimizers = [("actor_rollout_ref.actor.optim", arr.actor.optim)]
    optimizers += [("critic.optim", critic.optim)] if use_critic else []
    for key, optim in optimizers:
        problems += _check_optimizer(key, optim)
    blocks = [("actor_rollout_ref.actor.fsdp_config", arr.actor.fsdp_config)]
    blocks += [("actor_rollout_ref.ref.fsdp_config", arr.ref.fsdp_config)] if use_ref else []
    blocks += [("critic.fsdp", critic.fsdp)] if use_critic else []
    for key, block in blocks:
        if precision_name(block.dtype) not in FSDP_DTYPES:
            problems.append(
                f"{key}.dtype={block.dtype!r} is not a compute dtype; expected bfloat16, float16 or float32"
            )
    sections = [("actor_rollout_ref.actor", arr.actor)] + ([("critic", critic)] if use_critic else [])
    for key, section in sections:
        factor = section.loss_scale_factor
        if factor is not None and (isinstance(factor, bool) or not isinstance(factor, int) or factor <= 0):
            problems.append(f"{key}.loss_scale_factor={factor!r} must be null or a positive integer")
    n = arr.rollout.n
    for role in ("actor", "ref"):
        if getattr(arr, role).rollout_n != n:
            problems.append(
                f"actor_rollout_ref.{role}.rollout_n={getattr(arr, role).rollout_n} differs from "
                f"actor_rollout_ref.rollout.n={n}: it mirrors the samples per prompt, which rollout.n sets; leave it "
                "at its default"
            )
    if critic.enable is False and config.algorithm.adv_estimator == "gae":
        problems.append(
            "critic.enable=False with algorithm.adv_estimator=gae: GAE needs the critic's values; enable the critic "
            "(null or True) or pick a critic-free estimator such as grpo"
        )
    return problems


def _check_optimizer(key: str, optim) -> list[str]:
    from verl.workers.engine.fsdp.setup import optimizer_class

    problems = []
    if optim.lr_scheduler_type not in LR_SCHEDULERS:
        problems.append(
            f"{key}.lr_scheduler_type={optim.lr_scheduler_type!r} is not supported; expected one of "
            f"{list(LR_SCHEDULERS)}"
        )
    elif not optim.zero_indexed_step and optim.lr_scheduler_type == "constant":
        problems.append(
            f"{key}.zero_indexed_step=False is read by the cosine schedule only (as in verl); set "
            f"{key}.lr_scheduler_type=cosine or leave zero_indexed_step at True"
        )
    try:
        cls = optimizer_class(optim)
    except ValueError as exc:
        return [*problems, f"{key}: {exc}"]
    extra = dict(optim.override_optimizer_config or {})
    params = inspect.signature(cls.__init__).parameters
    if not any(p.kind is inspect.Parameter.VAR_KEYWORD for p in params.values()):
        unknown = sorted(k for k in extra if k not in params or k in ("self", "params"))
        if unknown:
            problems.append(
                f"{key}.override_optimizer_config has {unknown}, which {optim.optimizer_impl}.{optim.optimizer} "
                f"does not take; its keyword arguments: {sorted(k for k in params if k not in ('self', 'params'))}"
            )
    return problems
