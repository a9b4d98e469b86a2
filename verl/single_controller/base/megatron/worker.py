"""`MegatronWorker`: a worker that reports its (tp, dp, pp, cp) coordinates for the Megatron dispatch modes."""

from verl.single_controller.base.decorator import Dispatch, register
from verl.single_controller.base.worker import DistGlobalInfo, DistRankInfo, Worker


class MegatronWorker(Worker):
    """Base for workers whose model is split by Megatron-core parallel groups (GPU only)."""

    def __init__(self, cuda_visible_devices=None) -> None:
        super().__init__(cuda_visible_devices)

    @register(dispatch_mode=Dispatch.ONE_TO_ALL)
    def get_megatron_global_info(self) -> DistGlobalInfo:
        from megatron.core import parallel_state as mpu

        return DistGlobalInfo(
            tp_size=mpu.get_tensor_model_parallel_world_size(),
            dp_size=mpu.get_data_parallel_world_size(),
            pp_size=mpu.get_pipeline_model_parallel_world_size(),
            cp_size=mpu.get_context_parallel_world_size(),
        )

    @register(dispatch_mode=Dispatch.ONE_TO_ALL)
    def get_megatron_rank_info(self) -> DistRankInfo:
        from megatron.core import parallel_state as mpu

        return DistRankInfo(
            tp_rank=mpu.get_tensor_model_parallel_rank(),
            dp_rank=mpu.get_data_parallel_rank(),
            pp_rank=mpu.get_pipeline_model_parallel_rank(),
            cp_rank=mpu.get_context_parallel_rank(),
        )
