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
