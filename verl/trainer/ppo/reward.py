"""Loading the reward function/manager from config and computing rewards (synchronously or as a Ray task)."""

from __future__ import annotations

import functools
import importlib.util
import inspect
import multiprocessing
import os
import sys

from verl.protocol import DataProto
from verl.trainer.config import PPOConfig
from verl.trainer.config.reward_model import RATE_LIMIT_KEYS
from verl.utils.reward_score import default_compute_score

__all__ = [
    "PendingReward",
    "compute_reward",
    "compute_reward_async",
    "get_custom_reward_fn",
    "load_reward_manager",
    "submit_reward",
]


def _typed(config) -> PPOConfig:
    """The typed config of a (possibly partial) PPO config; sections it lacks take the YAML's defaults."""
    return PPOConfig.from_config(config if config is not None else {})


def get_custom_reward_fn(config):
    """The user's ``custom_reward_function.name`` from the file ``custom_reward_function.path``; None if no path.

    The returned wrapper adds ``custom_reward_function.reward_kwargs`` to every call.
    """
    reward_fn_config = _typed(config).custom_reward_function
    file_path = reward_fn_config.path
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

    function_name = reward_fn_config.name
    if not hasattr(module, function_name):
        raise AttributeError(
            f"custom_reward_function.name={function_name!r} is not defined in custom_reward_function.path={file_path!r}"
        )
    print(f"using customized reward function '{function_name}' from '{file_path}'")
    raw_fn = getattr(module, function_name)
    reward_kwargs = dict(reward_fn_config.reward_kwargs or {})

    @functools.wraps(raw_fn)
    def wrapped_fn(*args, **kwargs):
        return raw_fn(*args, **kwargs, **reward_kwargs)

    return wrapped_fn


def load_reward_manager(config, tokenizer, num_examine: int, **reward_kwargs):
    """Build ``reward_model.reward_manager`` (default ``naive``) around the custom or default scoring function."""
    from verl.workers.reward_manager import get_reward_manager_cls

    typed = _typed(config)
    reward_manager_cls = get_reward_manager_cls(typed.reward_model.reward_manager)

    compute_score = get_custom_reward_fn(typed)
    if compute_score is None:
        sandbox = typed.reward_model.sandbox_fusion
        if sandbox.url:
            # one semaphore shared by every process the manager may use bounds the sandbox's load
            semaphore = multiprocessing.Manager().Semaphore(sandbox.max_concurrent)
            compute_score = functools.partial(
                default_compute_score,
                sandbox_fusion_url=sandbox.url,
                concurrent_semaphore=semaphore,
                memory_limit_mb=sandbox.memory_limit_mb,
            )
        else:
            compute_score = default_compute_score

    # DAPO's overlong shaping needs the response budget and its buffer: handed to any manager that takes them (as
    # verl's main_dapo does), here so that the Ray task of launch_reward_fn_async builds the same manager
    params = inspect.signature(reward_manager_cls.__init__).parameters
    rm = typed.reward_model
    from_config = {
        "max_resp_len": typed.data.max_response_length,
        "overlong_buffer_cfg": rm.overlong_buffer,
        **{key: getattr(rm, key) for key in RATE_LIMIT_KEYS},
    }
    for name, value in from_config.items():
        if name in params and name not in reward_kwargs:
            reward_kwargs[name] = value
    reward_fn_key = typed.data.reward_fn_key
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
    typed = _typed(config)
    reward_fn = load_reward_manager(typed, tokenizer, num_examine=0, **typed.reward_model.reward_kwargs)
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


class PendingReward:
    """The reward of one batch, computed already or by a Ray task still running.

    ``result()`` gives ``(reward_tensor (bs, response_length), reward_extra_infos_dict)`` either way, waiting for
    the task if there is one, so the trainer handles one type whether ``launch_reward_fn_async`` is on or off.
    """

    def __init__(self, value: tuple | None = None, ref=None) -> None:
        self._value, self._ref = value, ref

    def result(self) -> tuple:
        if self._ref is not None:
            import ray

            self._value, self._ref = ray.get(self._ref), None
        return self._value


def submit_reward(data: DataProto, reward_fn, config, tokenizer, launch_async: bool) -> PendingReward:
    """Score ``data`` now with ``reward_fn``, or (``launch_async``) in a Ray task that builds its own manager from
    ``config`` and overlaps the trainer's next phases."""
    if launch_async:
        return PendingReward(ref=compute_reward_async.remote(data, config, tokenizer))
    return PendingReward(value=compute_reward(data, reward_fn))
