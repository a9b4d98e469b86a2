"""A named Ray actor through which rank 0 of a worker group publishes its rendezvous address to the others."""

import time

import ray

# how long a rank other than 0 waits for rank 0's register center (the worker group passes its own
# ``ray_wait_register_center_timeout`` through this variable)
TIMEOUT_ENV = "WG_REGISTER_CENTER_TIMEOUT"


@ray.remote
class WorkerGroupRegisterCenter:
    """Holds rank 0's MASTER_ADDR/MASTER_PORT and the node id of every rank."""

    def __init__(self, rank_zero_info: dict) -> None:
        self.rank_zero_info = rank_zero_info
        self.workers_info: dict[int, str] = {}

    def get_rank_zero_info(self) -> dict:
        return self.rank_zero_info

    def set_worker_info(self, rank: int, node_id: str) -> None:
        self.workers_info[rank] = node_id

    def get_worker_info(self) -> dict[int, str]:
        return self.workers_info


def create_worker_group_register_center(name: str, info: dict):
    """Start the register center as a named actor (one CPU-less actor per worker group)."""
    return WorkerGroupRegisterCenter.options(name=name, num_cpus=0).remote(info)


def wait_rank_zero_info(name: str, timeout: float) -> tuple["ray.actor.ActorHandle", dict]:
    """The register center ``name`` (its actor handle) and rank 0's ``{"MASTER_ADDR", "MASTER_PORT"}`` from it, once
    rank 0 has started it.

    Called by the driver and by every other rank, which all start at once: each waits here for rank 0 instead of the
    driver starting the other ranks only after rank 0 is up (a worker process's start-up, its imports of torch and
    transformers, is most of a small run's set-up time)."""
    deadline = time.monotonic() + timeout
    delay = 0.01
    while True:
        try:
            center = ray.get_actor(name)
            break
        except ValueError:
            if time.monotonic() > deadline:
                raise TimeoutError(
                    f"rank 0 of its worker group did not start the register center '{name}' within {timeout:g}s. "
                    "The worker may have failed in __init__ (see the Ray logs) or the cluster lacks the resources to "
                    "place it; trainer.ray_wait_register_center_timeout raises the limit."
                ) from None
            time.sleep(delay)
            delay = min(delay * 2, 0.5)
    # the reply through a future, not ray.get: an async actor's constructor runs on its event loop, where a blocking
    # ray.get draws Ray's warning
    info = center.get_rank_zero_info.remote().future().result(timeout=max(1.0, deadline - time.monotonic()))
    return center, info
