"""Config checks of a standalone rollout (``actor_rollout_ref.hybrid_engine=False``), before Ray starts.

The rollout then runs on a resource pool of its own (top-level ``rollout.nnodes`` x ``rollout.n_gpus_per_node``,
verl's one-step-off-policy keys) and receives the actor's weights through the checkpoint engine after each update.
What that path cannot honour yet is refused here, naming the key, the value and what to do instead.
"""

from __future__ import annotations

import os

__all__ = ["check_rollout_pool_keys", "check_standalone_rollout", "rollout_pool_processes"]

_HE = "actor_rollout_ref.hybrid_engine"


def rollout_pool_processes(config) -> int:
    """Worker processes of the rollout pool (``config``: the typed PPO config)."""
    return config.rollout.nnodes * config.rollout.n_gpus_per_node


def check_rollout_pool_keys(config) -> list[str]:
    """verl 0.9's place for the standalone pool, ``actor_rollout_ref.rollout.nnodes`` / ``n_gpus_per_node`` (the
    typed config copies them to the top-level block when nnodes > 0): read only for a standalone rollout, so a value
    that would do nothing is refused."""
    key = "actor_rollout_ref.rollout"
    rollout = config.actor_rollout_ref.rollout
    if rollout.nnodes < 0:
        return [f"{key}.nnodes={rollout.nnodes} must be >= 0 (0: the top-level rollout block names the pool)"]
    if rollout.nnodes > 0 and config.actor_rollout_ref.hybrid_engine:
        return [
            f"{key}.nnodes={rollout.nnodes} names a standalone rollout's pool, but {_HE}=True runs the rollout in the "
            f"actor's workers; set {_HE}=False for a pool of its own, or leave nnodes=0"
        ]
    if rollout.nnodes == 0 and rollout.n_gpus_per_node != config.trainer.n_gpus_per_node:
        return [
            f"{key}.n_gpus_per_node={rollout.n_gpus_per_node} is read only with {key}.nnodes > 0 (a standalone "
            f"rollout's pool); set nnodes too, or use the top-level rollout.n_gpus_per_node"
        ]
    return []


def check_standalone_rollout(config, device: str | None, check_device: bool = True) -> list[str]:
    """The problems of a standalone-rollout config (empty for the hybrid engine); ``device``: the resolved
    ``trainer.device`` (None when unknown), for the count of processes a single machine must hold."""
    if config.actor_rollout_ref.hybrid_engine:
        return []
    problems = []
    for key in ("rollout.nnodes", "rollout.n_gpus_per_node"):
        name = key.split(".")[1]
        value = getattr(config.rollout, name)
        if isinstance(value, bool) or not isinstance(value, int) or value < 1:
            problems.append(f"{key}={value!r} must be an integer >= 1 (the standalone rollout's pool, {_HE}=False)")
    if problems:
        return problems
    arr = config.actor_rollout_ref
    world = rollout_pool_processes(config)
    if arr.actor.strategy == "megatron":
        problems.append(
            f"{_HE}=False with actor_rollout_ref.actor.strategy='megatron': the checkpoint engine sends FSDP "
            "weights only so far; use strategy=fsdp2, or the hybrid engine"
        )
    if arr.model.is_lora:
        problems.append(
            f"{_HE}=False with actor_rollout_ref.model.lora_rank={arr.model.lora_rank}: the checkpoint engine sends "
            "full weights, not adapters; set lora_rank=0 or use the hybrid engine"
        )
    tp = arr.rollout.tensor_model_parallel_size
    if arr.rollout.name == "vllm" and world % tp != 0:
        problems.append(
            f"actor_rollout_ref.rollout.tensor_model_parallel_size={tp} must divide the rollout pool's {world} "
            "processes (rollout.nnodes * rollout.n_gpus_per_node)"
        )
    problems += _checkpoint_engine_problems(arr.rollout.checkpoint_engine, device)
    batch = config.data.generation_batch_size
    if batch % world != 0:
        problems.append(
            f"data.train_batch_size={batch} prompts must be divisible by the rollout pool's {world} processes "
            f"(rollout.nnodes * rollout.n_gpus_per_node) so each rollout worker generates the same number"
        )
    single_local_node = config.trainer.nnodes == 1 and config.rollout.nnodes == 1 and not os.environ.get("RAY_ADDRESS")
    if check_device and device is not None and single_local_node:
        total = config.trainer.n_gpus_per_node + config.rollout.n_gpus_per_node
        if device == "cpu":
            have, what = os.cpu_count() or 1, "core(s)"
        else:
            from verl.utils.device import get_torch_device

            have, what = get_torch_device().device_count(), f"{device} device(s)"
        if total > have:
            problems.append(
                f"trainer.n_gpus_per_node={config.trainer.n_gpus_per_node} + rollout.n_gpus_per_node="
                f"{config.rollout.n_gpus_per_node} = {total} worker processes on one node, but this machine has "
                f"{have} {what}; lower them so that their sum is at most {have}"
            )
    return problems


def _checkpoint_engine_problems(engine, device: str | None) -> list[str]:
    """The transport and bucket size the workers would otherwise reject only after Ray has started them."""
    from verl.checkpoint_engine.base import get_checkpoint_engine_cls, resolve_backend

    key = "actor_rollout_ref.rollout.checkpoint_engine"
    problems = []
    try:
        get_checkpoint_engine_cls(engine.backend, custom_backend_module=engine.custom_backend_module)
    except ImportError as err:
        problems.append(f"{key}.custom_backend_module={engine.custom_backend_module!r} cannot be imported: {err}")
        return problems
    except ValueError as err:
        problems.append(str(err))
    else:
        if device == "cpu" and resolve_backend(engine.backend) == "nccl":
            problems.append(
                f"{key}.backend={engine.backend!r} needs CUDA devices, but trainer.device='cpu'; use backend=gloo "
                "(or naive, which means gloo on CPU)"
            )
    size = engine.update_weights_bucket_megabytes
    if isinstance(size, bool) or not isinstance(size, int | float) or not size > 0:
        problems.append(f"{key}.update_weights_bucket_megabytes={size!r} must be a positive number of MiB")
    return problems
