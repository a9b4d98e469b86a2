"""Shared fixtures. Ray is started once per test session with a fixed CPU count, so tests behave the same on a
laptop, a CI runner and a GPU box."""

import os

import pytest

os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
os.environ.setdefault("RAY_DEDUP_LOGS", "0")


@pytest.fixture(scope="session")
def ray_cluster():
    """A local Ray instance with 4 logical CPUs (more than the cores: workers here mostly wait)."""
    import ray

    if not ray.is_initialized():
        ray.init(
            address="local",  # never a cluster another process left running on this machine
            num_cpus=4,
            include_dashboard=False,
            log_to_driver=False,
            runtime_env={"env_vars": {"TOKENIZERS_PARALLELISM": "false", "OMP_NUM_THREADS": "1"}},
        )
    yield ray
    ray.shutdown()


# Files named *_on_gpu.py check the CUDA paths; without an accelerator they are skipped, unless
# VERL_GPU_CHECK_DEVICE=cpu asks to run them on CPU (scripts/gpu_check.sh --cpu-smoke: same steps, tiny shapes).
GPU_FILE_SUFFIX = "_on_gpu.py"


def gpu_checks_on_cpu() -> bool:
    """True when the *_on_gpu.py files run on CPU as a smoke test (``VERL_GPU_CHECK_DEVICE=cpu``)."""
    return os.environ.get("VERL_GPU_CHECK_DEVICE", "").lower() == "cpu"


def pytest_collection_modifyitems(config, items):
    from verl.utils.device import is_accelerator_available

    if is_accelerator_available() or gpu_checks_on_cpu():
        return
    skip = pytest.mark.skip(reason="needs a CUDA/NPU accelerator (VERL_GPU_CHECK_DEVICE=cpu runs it on CPU)")
    for item in items:
        if item.path.name.endswith(GPU_FILE_SUFFIX):
            item.add_marker(skip)


@pytest.fixture(scope="session")
def tiny_vlm_dir(tmp_path_factory) -> str:
    """A tiny random Qwen2.5-VL folder (model, tokenizer, image processor), built once per session."""
    from verl.demo.tiny_vlm import make_tiny_vlm_dir

    return make_tiny_vlm_dir(str(tmp_path_factory.mktemp("tiny_vlm")))


@pytest.fixture
def no_process_group_left():
    """Destroys the default process group an in-process run started, so the next test can start its own."""
    yield
    import torch.distributed as dist

    if dist.is_initialized():
        dist.destroy_process_group()
