"""Ray worker groups for Megatron workers: query each rank's (tp, dp, pp, cp) coordinates after start-up."""

from verl.single_controller.base.megatron.worker_group import MegatronWorkerGroup
from verl.single_controller.ray.base import RayClassWithInitArgs, RayResourcePool, RayWorkerGroup


class NVMegatronRayWorkerGroup(RayWorkerGroup, MegatronWorkerGroup):
    """A RayWorkerGroup of MegatronWorkers; drives the MEGATRON_* dispatch modes."""

    def __init__(self, resource_pool: RayResourcePool, ray_cls_with_init: RayClassWithInitArgs, **kwargs):
        super().__init__(resource_pool=resource_pool, ray_cls_with_init=ray_cls_with_init, **kwargs)
        self._megatron_rank_info = self.execute_all_sync(method_name="get_megatron_rank_info")
        self._megatron_global_info = self.execute_rank_zero_sync(method_name="get_megatron_global_info")


MegatronRayWorkerGroup = NVMegatronRayWorkerGroup
