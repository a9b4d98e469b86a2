"""Loading the reward function/manager from config and computing rewards (synchronously or as a Ray task)."""

from __future__ import annotations

import functools
import importlib.util
import multiprocessing
import os
import sys

from verl.protocol import DataProto
from verl.utils.reward_score import default_compute_score

__all__ = ["get_custom_reward_fn", "load_reward_manager", "compute_reward", "compute_reward_async"]


def _section(config, key: str):
    section = config.get(key) if config is not None else None
    return section if section is not None else {}


def get_custom_reward_fn(config):
    """The user's ``custom_reward_function.name`` from the file ``custom_reward_function.path``; None if no path.

    The returned wrapper adds ``custom_reward_function.reward_kwargs`` to every call.
    """
    reward_fn_config = _section(config, "custom_reward_function")
    file_path = reward_fn_config.get("path")
    if not file_path:
        return None
    if not os.path.exists(file_path):
        raise FileNotFoundError(f"custom_reward_function.path={file_path!r}: reward function file not found")

    spec = importlib.util.spec_from_file_location("custom_module", file_path)
    module = importlib.util.module_from_spec(spec)
    try:
        # registered so pickling by reference (Ray, process pools) finds the module again
        sys.modules["custom_module"] = module
        spec.loader.exec_module(module)
    except Exception as e:
        raise RuntimeError(f"Error loading module from custom_reward_function.path={file_path!r}: {e}") from e

    function_name = reward_fn_config.get("name")
    if not hasattr(module, function_name):
        raise AttributeError(
            f"custom_reward_function.name={function_name!r} is not defined in custom_reward_function.path={file_path!r}"
        )
    print(f"using customized reward function '{function_name}' from '{file_path}'")
    raw_fn = getattr(module, function_name)
    reward_kwargs = dict(reward_fn_config.get("reward_kwargs", {}) or {})

    @functools.wraps(raw_fn)
    def wrapped_fn(*args, **kwargs):
        return raw_fn(*args, **kwargs, **reward_kwargs)

    return wrapped_fn


def load_reward_manager(config, tokenizer, num_examine: int, **reward_kwargs):
    """Build ``reward_model.reward_manager`` (default ``naive``) around the custom or default scoring function."""
    from verl.workers.reward_manager import get_reward_manager_cls

    reward_model_config = _section(config, "reward_model")
    reward_manager_cls = get_reward_manager_cls(reward_model_config.get("reward_manager", "naive"))

    compute_score = get_custom_reward_fn(config)
    if compute_score is None:
        sandbox_config = reward_model_config.get("sandbox_fusion") or {}
        sandbox_url = sandbox_config.get("url")
        if sandbox_url:
            # one semaphore shared by every process the manager may use bounds the sandbox's load
            semaphore = multiprocessing.Manager().Semaphore(sandbox_config.get("max_concurrent", 64))
            compute_score = functools.partial(
                default_compute_score,
                sandbox_fusion_url=sandbox_url,
                concurrent_semaphore=semaphore,
                memory_limit_mb=sandbox_config.get("memory_limit_mb", 1024),
            )
        else:
            compute_score = default_compute_score

    reward_fn_key = _section(config, "data").get("reward_fn_key", "data_source")
    return reward_manager_cls(
        tokenizer=tokenizer,
        num_examine=num_examine,
        compute_score=compute_score,
        reward_fn_key=reward_fn_key,
        **reward_kwargs,
    )


def compute_reward(data: DataProto, reward_fn) -> tuple:
    """``(reward_tensor (bs, response_length), reward_extra_infos_dict)`` from ``reward_fn``."""
    try:
        result = reward_fn(data, return_dict=True)
        reward_tensor = result["reward_tensor"]
        reward_extra_infos_dict = result.get("reward_extra_info", {})
    except Exception as e:
        # managers written for the older contract accept only (data) and return the tensor
        print(f"Error in reward_fn: {e}")
        reward_tensor = reward_fn(data)
        reward_extra_infos_dict = {}
    return reward_tensor, reward_extra_infos_dict


def _compute_reward_task(data: DataProto, config, tokenizer) -> tuple:
    reward_kwargs = dict(_section(config, "reward_model").get("reward_kwargs", {}) or {})
    reward_fn = load_reward_manager(config, tokenizer, num_examine=0, **reward_kwargs)
    return compute_reward(data, reward_fn)


class _LazyRemote:
    """``ray.remote(num_cpus=1)`` applied on first use, so importing this module does not import Ray."""

    def __init__(self, fn):
        self._fn = fn
        self._remote = None
        functools.update_wrapper(self, fn)

    def _get(self):
        if self._remote is None:
            import ray

            self._remote = ray.remote(num_cpus=1)(self._fn)
        return self._remote

    def remote(self, *args, **kwargs):
        """Submit the task; returns an ``ObjectRef`` of ``(reward_tensor, reward_extra_infos_dict)``."""
        return self._get().remote(*args, **kwargs)

    def options(self, **kwargs):
        """Ray task options (resources, runtime env, ...)."""
        return self._get().options(**kwargs)

    def __call__(self, *args, **kwargs):
        return self._fn(*args, **kwargs)


# A Ray task (num_cpus=1) that builds a fresh manager from config and scores the batch, overlapping the trainer.
compute_reward_async = _LazyRemote(_compute_reward_task)
