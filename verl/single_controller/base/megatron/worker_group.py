"""`MegatronWorkerGroup`: a worker group that knows each rank's (tp, dp, pp, cp) coordinates."""

from verl.single_controller.base.worker import DistGlobalInfo, DistRankInfo
from verl.single_controller.base.worker_group import ResourcePool, WorkerGroup


class MegatronWorkerGroup(WorkerGroup):
    """Holds per-rank parallel coordinates, filled by the backend after the workers start."""

    def __init__(self, resource_pool: ResourcePool, **kwargs) -> None:
        super().__init__(resource_pool=resource_pool, **kwargs)
        self._megatron_rank_info: list[DistRankInfo] | None = None
        self._megatron_global_info: DistGlobalInfo | None = None

    def init_megatron(self, default_megatron_kwargs=None):
        raise NotImplementedError("the backend worker group sets up Megatron")

    def get_megatron_rank_info(self, rank: int) -> DistRankInfo:
        assert 0 <= rank < self.world_size, f"rank must be in [0, {self.world_size}), got {rank}"
        return self._megatron_rank_info[rank]

    def get_megatron_global_info(self) -> DistGlobalInfo:
        return self._megatron_global_info

    @property
    def tp_size(self) -> int:
        return self._megatron_global_info.tp_size

    @property
    def dp_size(self) -> int:
        return self._megatron_global_info.dp_size

    @property
    def pp_size(self) -> int:
        return self._megatron_global_info.pp_size

    @property
    def cp_size(self) -> int:
        return self._megatron_global_info.cp_size
