"""A named Ray actor through which rank 0 of a worker group publishes its rendezvous address to the others."""

import ray


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
