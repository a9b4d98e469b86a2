"""Roles of a PPO trainer and the Ray resource pools that host them."""

from __future__ import annotations

from dataclasses import dataclass, field
from enum import Enum

from verl.single_controller.ray import RayResourcePool


class Role(Enum):
    """The kinds of workers a trainer may create. Subclass to add roles."""

    Actor = 0
    Rollout = 1
    ActorRollout = 2
    Critic = 3
    RefPolicy = 4
    RewardModel = 5
    ActorRolloutRef = 6


@dataclass
class ResourcePoolManager:
    """Which processes each named pool has (``{"global_pool": [n_per_node] * nnodes}``) and which role uses which."""

    resource_pool_spec: dict[str, list[int]]
    mapping: dict[Role, str]
    resource_pool_dict: dict[str, RayResourcePool] = field(default_factory=dict)
    use_gpu: bool = True

    def create_resource_pool(self) -> None:
        """Create the Ray placement groups after checking that the cluster can hold them."""
        self._check_resource_available()
        for name, process_on_nodes in self.resource_pool_spec.items():
            # one worker process per bundle; colocated roles share it through create_colocated_worker_cls
            self.resource_pool_dict[name] = RayResourcePool(
                process_on_nodes=process_on_nodes, use_gpu=self.use_gpu, max_colocate_count=1, name_prefix=name
            )

    def get_resource_pool(self, role: Role) -> RayResourcePool:
        return self.resource_pool_dict[self.mapping[role]]

    def get_n_gpus(self) -> int:
        return sum(sum(nodes) for nodes in self.resource_pool_spec.values())

    def _check_resource_available(self) -> None:
        try:
            import ray
        except ImportError:  # no Ray installed, so no cluster: the in-process group or torchrun runs the workers
            return
        if not ray.is_initialized():  # in-process worker groups need no cluster
            return
        kind = "GPU" if self.use_gpu else "CPU"
        per_node = {}
        for node, resources in ray._private.state.available_resources_per_node().items():
            amount = resources.get(kind, 0)
            if self.use_gpu and amount == 0:
                amount = resources.get("NPU", 0)
            per_node[node] = amount
        required = self.get_n_gpus()
        available = sum(per_node.values())
        if available < required:
            raise ValueError(
                f"the cluster has {available} {kind}s available but the resource pools need {required} "
                f"({self.resource_pool_spec}); lower trainer.n_gpus_per_node / trainer.nnodes or add nodes"
            )
        free = list(per_node.values())
        for name, process_on_nodes in self.resource_pool_spec.items():
            need, count = process_on_nodes[0], len(process_on_nodes)
            for i, amount in enumerate(free):
                if count and amount >= need:
                    free[i] -= need
                    count -= 1
            if count:
                raise ValueError(
                    f"Resource pool {name}: {count}*{need} cannot be satisfied in this ray cluster ({per_node})"
                )
