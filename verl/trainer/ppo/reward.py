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
from verl.utils.reward_score import default_compute_score
from verl.workers.config.reward import RATE_LIMIT_KEYS

__all__ = [
    "PendingReward",
    "bind_reward_loop_args",
    "compute_reward",
    "compute_reward_async",
    "get_custom_reward_fn",
    "get_served_reward_model",
    "load_reward_manager",
    "reward_manager_class",
    "reward_source_metrics",
    "submit_reward",
]


def _typed(config) -> PPOConfig:
    """The typed config of a (possibly partial) PPO config; sections it lacks take the YAML's defaults."""
    return PPOConfig.from_config(config if config is not None else {})


def _load_object(file_path: str, name: str, module_name: str, path_key: str, name_key: str):
    """``name`` from the Python file ``file_path``, imported as the module ``module_name``; errors name the config
    keys ``path_key`` and ``name_key``."""
    if not os.path.exists(file_path):
        raise FileNotFoundError(f"{path_key}={file_path!r}: file not found")

    spec = importlib.util.spec_from_file_location(module_name, file_path)
    module = importlib.util.module_from_spec(spec)
    try:
        # registered so pickling by reference (Ray, process pools) finds the module again
        sys.modules[module_name] = module
        spec.loader.exec_module(module)
    except Exception as e:
        raise RuntimeError(f"Error loading module from {path_key}={file_path!r}: {e}") from e

    if not hasattr(module, name):
        raise AttributeError(f"{name_key}={name!r} is not defined in {path_key}={file_path!r}")
    return getattr(module, name)


def _load_function(file_path: str, function_name: str, reward_kwargs: dict, key: str, module_name: str):
    """``function_name`` from the file ``file_path``, ``reward_kwargs`` added to every call; errors name ``key``."""
    raw_fn = _load_object(file_path, function_name, module_name, f"{key}.path", f"{key}.name")
    print(f"using customized reward function '{function_name}' from '{file_path}'")
    reward_kwargs = dict(reward_kwargs or {})

    @functools.wraps(raw_fn)
    def wrapped_fn(*args, **kwargs):
        return raw_fn(*args, **kwargs, **reward_kwargs)

    return wrapped_fn


def get_custom_reward_fn(config):
    """The user's ``custom_reward_function.name`` from the file ``custom_reward_function.path``; None if no path.

    The returned wrapper adds ``custom_reward_function.reward_kwargs`` to every call.
    """
    reward_fn_config = _typed(config).custom_reward_function
    if not reward_fn_config.path:
        return None
    return _load_function(
        reward_fn_config.path,
        reward_fn_config.name,
        reward_fn_config.reward_kwargs,
        "custom_reward_function",
        "custom_module",
    )


_SERVED: dict[tuple, object] = {}


def get_served_reward_model(config):
    """The run's served reward model (``reward_model.use_reward_loop`` and ``enable``): a generative judge, a
    discriminative model, or both (`served_model_paths`), not yet started; None otherwise. One per process for a given
    set of models and replicas (shared by the train and val rewards)."""
    from verl.trainer.config.checks.reward_loop import served_model_paths

    typed = _typed(config)
    rm = typed.reward_model
    judge, discriminative = served_model_paths(typed)
    if judge is None and discriminative is None:
        return None
    from verl.utils.fs import copy_to_local
    from verl.workers.reward_model.served import ServedRewardModel

    if rm.enable_resource_pool:
        slots, num_cpus = rm.n_gpus_per_node * rm.nnodes, 1.0
    else:  # colocated: as many replicas as the trainer has slots, sharing its CPUs
        slots, num_cpus = typed.trainer.n_gpus_per_node * typed.trainer.nnodes, 0.0
    replicas = max(1, slots // max(1, rm.rollout.tensor_model_parallel_size))
    key = (judge, discriminative, replicas, num_cpus, rm.rollout.dtype, rm.rollout.name)
    if key not in _SERVED:
        _SERVED[key] = ServedRewardModel(
            copy_to_local(judge) if judge else None,
            replicas=replicas,
            num_cpus=num_cpus,
            dtype=rm.rollout.dtype,
            max_prompt_tokens=rm.rollout.prompt_length,
            max_response_tokens=rm.rollout.response_length,
            trust_remote_code=rm.model.trust_remote_code,
            engine=rm.rollout.name,
            gpu_memory_utilization=rm.rollout.gpu_memory_utilization,
            score_model_path=copy_to_local(discriminative) if discriminative else None,
        )
    return _SERVED[key]


_LOOP_ARGS = ("reward_router_address", "reward_model_tokenizer")


def bind_reward_loop_args(fn, served):
    """``fn`` called with verl's reward-loop arguments ``reward_router_address`` (``"127.0.0.1:<port>"`` of the served
    reward model's router) and ``reward_model_tokenizer``, those of them it accepts; sync or ``async`` as ``fn`` is.
    The address is read at call time, so the replicas start on the first call (or when the trainer starts them)."""
    from verl.workers.reward_manager.async_scoring import is_async_fn

    try:
        params = inspect.signature(fn).parameters
    except (TypeError, ValueError):
        return fn
    takes_any = any(p.kind is inspect.Parameter.VAR_KEYWORD for p in params.values())
    wanted = [name for name in _LOOP_ARGS if takes_any or name in params]
    if not wanted:
        return fn

    def loop_args() -> dict:
        values = {"reward_router_address": served.address, "reward_model_tokenizer": served.tokenizer}
        return {name: values[name] for name in wanted}

    if is_async_fn(fn):

        @functools.wraps(fn)
        async def bound_async(*args, **kwargs):
            return await fn(*args, **kwargs, **loop_args())

        return bound_async

    @functools.wraps(fn)
    def bound(*args, **kwargs):
        return fn(*args, **kwargs, **loop_args())

    return bound


def reward_source_metrics(non_tensor_batch: dict) -> dict[str, float]:
    """``reward/<name>/{mean,max,min}`` of each hybrid reward source's per-sample scores (``reward_source/<name>``)."""
    import numpy as np

    from verl.workers.reward_manager.hybrid import SOURCE_PREFIX

    metrics = {}
    for key, values in non_tensor_batch.items():
        if key.startswith(SOURCE_PREFIX):
            scores = np.asarray(values, dtype=np.float64)
            name = key[len(SOURCE_PREFIX) :]
            metrics[f"reward/{name}/mean"] = float(scores.mean())
            metrics[f"reward/{name}/max"] = float(scores.max())
            metrics[f"reward/{name}/min"] = float(scores.min())
    return metrics


def _default_scoring_fn(typed):
    sandbox = typed.reward_model.sandbox_fusion
    if sandbox.url:
        # one semaphore shared by every process the manager may use bounds the sandbox's load
        semaphore = multiprocessing.Manager().Semaphore(sandbox.max_concurrent)
        return functools.partial(
            default_compute_score,
            sandbox_fusion_url=sandbox.url,
            concurrent_semaphore=semaphore,
            memory_limit_mb=sandbox.memory_limit_mb,
        )
    return default_compute_score


def _build_manager(typed, reward_manager_cls, compute_score, tokenizer, num_examine: int, reward_kwargs: dict):
    # DAPO's overlong shaping needs the response budget and its buffer: handed to any manager that takes them (as
    # verl's main_dapo does), here so that the Ray task of launch_reward_fn_async builds the same manager
    params = inspect.signature(reward_manager_cls.__init__).parameters
    rm = typed.reward_model
    from_config = {
        "max_resp_len": typed.data.max_response_length,
        "overlong_buffer_cfg": rm.overlong_buffer,
        "num_workers": rm.num_workers,
        **{key: getattr(rm, key) for key in RATE_LIMIT_KEYS},
    }
    reward_kwargs = dict(reward_kwargs)
    for name, value in from_config.items():
        if name in params and name not in reward_kwargs:
            reward_kwargs[name] = value
    return reward_manager_cls(
        tokenizer=tokenizer,
        num_examine=num_examine,
        compute_score=compute_score,
        reward_fn_key=typed.data.reward_fn_key,
        **reward_kwargs,
    )


def _hybrid_manager(typed, reward_manager_cls, custom_fn, served, tokenizer, num_examine: int, reward_kwargs: dict):
    """``reward_model.reward_sources``: one manager per function source (or the rm worker's score), combined."""
    from verl.workers.reward_manager import HybridRewardManager, RewardSource

    rm = typed.reward_model
    sources = []
    for i, source in enumerate(rm.reward_sources):
        if source.type == "reward_model":  # the worker's rm_scores, or the served discriminative model
            scorer = _served_scorer(served, tokenizer, 0)
            sources.append(RewardSource(source.name, source.weight, scorer))
            continue
        if source.path:
            key = f"reward_model.reward_sources[{i}]"
            fn = _load_function(source.path, source.function, {}, key, f"reward_source_{source.name}")
        else:
            fn = custom_fn or _default_scoring_fn(typed)
        if served is not None:
            fn = bind_reward_loop_args(fn, served)
        manager = _build_manager(typed, reward_manager_cls, fn, tokenizer, 0, reward_kwargs)
        sources.append(RewardSource(source.name, source.weight, manager))
    combine = None
    if rm.reward_combine.path:
        combine = _load_function(
            rm.reward_combine.path, rm.reward_combine.name, {}, "reward_model.reward_combine", "reward_combine"
        )
    return HybridRewardManager(tokenizer, num_examine, sources, combine, reward_fn_key=typed.data.reward_fn_key)


def _served_scorer(served, tokenizer, num_examine: int):
    """The manager reading the served discriminative reward model; None where none is served (the reward-model
    worker's ``rm_scores`` are read instead)."""
    if served is None or not served.score_model_path:
        return None
    from verl.workers.reward_model.served import ServedScoreManager

    return ServedScoreManager(tokenizer, served, num_examine)


def reward_manager_class(config) -> type:
    """The manager class ``reward_model.reward_manager`` names: a registered manager, or with
    ``reward.reward_manager.source=importlib`` the class of that name in the file ``reward.reward_manager.module.path``
    (imported as ``module.name``), which takes the registered managers' constructor and call."""
    from verl.workers.reward_manager import get_reward_manager_cls

    typed = _typed(config)
    name, manager = typed.reward_model.reward_manager, typed.reward.reward_manager
    if manager.source != "importlib":
        return get_reward_manager_cls(name)
    module = manager.module
    return _load_object(
        module.path,
        name,
        module.name or "custom_reward_manager",
        "reward.reward_manager.module.path",
        "reward_model.reward_manager (reward.reward_manager.name)",
    )


def load_reward_manager(config, tokenizer, num_examine: int, **reward_kwargs):
    """Build ``reward_model.reward_manager`` (default ``naive``) around the custom or default scoring function.

    With ``reward_model.use_reward_loop`` and ``enable``, the custom function also gets ``reward_router_address`` and
    ``reward_model_tokenizer`` (those it accepts); with ``reward_model.reward_sources``, the manager is a hybrid of
    one manager per source."""
    typed = _typed(config)
    reward_manager_cls = reward_manager_class(typed)
    served = get_served_reward_model(typed)
    custom_fn = get_custom_reward_fn(typed)
    if typed.reward_model.reward_sources:
        return _hybrid_manager(typed, reward_manager_cls, custom_fn, served, tokenizer, num_examine, reward_kwargs)
    if served is not None and served.score_model_path and custom_fn is None:  # verl: no function, a DisRM's score
        return _served_scorer(served, tokenizer, num_examine)
    compute_score = custom_fn if custom_fn is not None else _default_scoring_fn(typed)
    if served is not None and custom_fn is not None:
        compute_score = bind_reward_loop_args(compute_score, served)
    return _build_manager(typed, reward_manager_cls, compute_score, tokenizer, num_examine, reward_kwargs)


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

    def metrics(self) -> dict[str, float]:
        """Metrics of how the reward was computed (the reward loop's overlap); none here."""
        return {}


def submit_reward(data: DataProto, reward_fn, config, tokenizer, launch_async: bool) -> PendingReward:
    """Score ``data`` now with ``reward_fn``, or (``launch_async``) in a Ray task that builds its own manager from
    ``config`` and overlaps the trainer's next phases."""
    if launch_async:
        return PendingReward(ref=compute_reward_async.remote(data, config, tokenizer))
    return PendingReward(value=compute_reward(data, reward_fn))
