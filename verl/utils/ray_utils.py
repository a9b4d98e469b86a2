"""Helpers around Ray used by worker groups and the trainer."""

import os
from concurrent.futures import ThreadPoolExecutor

_NOSET_VISIBLE_DEVICES_ENVS = (
    "RAY_EXPERIMENTAL_NOSET_CUDA_VISIBLE_DEVICES",
    "RAY_EXPERIMENTAL_NOSET_ROCR_VISIBLE_DEVICES",
    "RAY_EXPERIMENTAL_NOSET_HIP_VISIBLE_DEVICES",
    "RAY_EXPERIMENTAL_NOSET_ASCEND_RT_VISIBLE_DEVICES",
    "RAY_EXPERIMENTAL_NOSET_HABANA_VISIBLE_MODULES",
    "RAY_EXPERIMENTAL_NOSET_NEURON_RT_VISIBLE_CORES",
    "RAY_EXPERIMENTAL_NOSET_TPU_VISIBLE_CHIPS",
    "RAY_EXPERIMENTAL_NOSET_ONEAPI_DEVICE_SELECTOR",
)


def ray_noset_visible_devices(env_vars=os.environ) -> bool:
    """True when Ray was told not to set *_VISIBLE_DEVICES, so workers pick their device by local rank."""
    return any(env_vars.get(name) for name in _NOSET_VISIBLE_DEVICES_ENVS)


def parallel_put(data_list: list, max_workers: int | None = None) -> list:
    """``ray.put`` every item from a thread pool; returns the ObjectRefs in input order."""
    import ray

    assert len(data_list) > 0, "parallel_put: data_list must not be empty"
    if max_workers is None:
        max_workers = min(len(data_list), 16)
    if len(data_list) == 1 or max_workers == 1:
        return [ray.put(item) for item in data_list]
    with ThreadPoolExecutor(max_workers=max_workers) as executor:
        return list(executor.map(ray.put, data_list))
