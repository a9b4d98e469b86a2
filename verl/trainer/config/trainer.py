"""`trainer` and `ray_init`: the training loop and its surroundings (`CustomRewardFunctionConfig`, re-exported here,
lives with the reward's sections in `verl.workers.config.reward`)."""

from __future__ import annotations

from dataclasses import dataclass, field

from verl.utils.config import BaseConfig
from verl.workers.config.reward import CustomRewardFunctionConfig

__all__ = ["CustomRewardFunctionConfig", "RayInitConfig", "RolloutPoolConfig", "TrainerConfig"]

_WATCHDOG_PHASES = {
    "init_model": 7200,
    "generate_sequences": None,
    "compute_log_prob": None,
    "compute_ref_log_prob": None,
    "compute_values": None,
    "compute_rm_score": None,
    "update_actor": None,
    "update_critic": None,
    "save_checkpoint": 7200,
    "load_checkpoint": 7200,
    "compute_reward": None,
}


@dataclass
class TrainerConfig(BaseConfig):
    """`trainer`."""

    balance_batch: bool = True
    total_epochs: int = 30
    total_training_steps: int | None = None
    profile_steps: list[int] | None = None
    controller_nsight_options: dict = field(
        default_factory=lambda: {
            "trace": "cuda,nvtx,cublas,ucx",
            "cuda-memory-usage": "true",
            "cuda-graph-trace": "graph",
        }
    )
    worker_nsight_options: dict = field(
        default_factory=lambda: {
            "trace": "cuda,nvtx,cublas,ucx",
            "cuda-memory-usage": "true",
            "cuda-graph-trace": "graph",
            "capture-range": "cudaProfilerApi",
            "capture-range-end": None,
            "kill": "none",
        }
    )
    project_name: str = "verl_examples"
    experiment_name: str = "gsm8k"
    logger: str | list[str] = field(default_factory=lambda: ["console", "wandb"])
    log_val_generations: int = 0
    rollout_data_dir: str | None = None
    validation_data_dir: str | None = None
    nnodes: int = 1
    n_gpus_per_node: int = 8
    save_freq: int = -1
    resume_mode: str = "auto"
    resume_from_path: str | None = None
    val_before_train: bool = True
    val_only: bool = False
    test_freq: int = -1
    critic_warmup: int = 0
    default_hdfs_dir: str | None = None
    del_local_ckpt_after_load: bool = False
    default_local_dir: str = "checkpoints/verl_examples/gsm8k"
    max_actor_ckpt_to_keep: int | None = None
    max_critic_ckpt_to_keep: int | None = None
    ray_wait_register_center_timeout: int = 300
    device: str = "cuda"
    console_format: str = "compact"
    run_report: bool = True
    # ours: deadline (seconds) of every worker-group call, and per phase (worker method; null: the general one)
    watchdog_timeout_s: float = 3600
    watchdog_phase_timeout_s: dict = field(default_factory=lambda: dict(_WATCHDOG_PHASES))
    # ours: stop after this many steps in a row with a skipped non-finite update or reward (0: never)
    max_consecutive_nonfinite: int = 3
    # ours: a failed checkpoint save stops the run (stop) or is warned about and skipped (continue)
    on_save_error: str = "stop"
    remove_previous_ckpt_in_save: bool = False

    @property
    def world_size(self) -> int:
        """Worker processes of the job: n_gpus_per_node * nnodes."""
        return self.n_gpus_per_node * self.nnodes


@dataclass
class RolloutPoolConfig(BaseConfig):
    """Top-level `rollout`: the resource pool of a standalone rollout (``actor_rollout_ref.hybrid_engine=False``)."""

    nnodes: int = 1
    n_gpus_per_node: int = 8

    @property
    def world_size(self) -> int:
        return self.nnodes * self.n_gpus_per_node


@dataclass
class AsyncTrainingConfig(BaseConfig):
    """`async_training`: the fully async recipe's keys. Only its YAML (recipe/fully_async_policy/config) has the
    section, so it is no field of PPOConfig: the recipe reads it with ``async_training_config(config)``."""

    staleness_threshold: float = 1  # verl's type; the fully async check requires a whole number of versions
    trigger_parameter_sync_step: int = 1
    require_batches: int = 1
    partial_rollout: bool = True  # verl's default: a sync pauses the generations in flight (HF and vLLM rollouts)
    use_rollout_log_probs: bool = False
    compute_prox_log_prob: bool = False


def async_training_config(config) -> AsyncTrainingConfig:
    """The typed ``async_training`` section of a composed config (the defaults where the section is absent)."""
    section = config.get("async_training") if hasattr(config, "get") else None
    return AsyncTrainingConfig() if section is None else AsyncTrainingConfig.from_config(section)


@dataclass
class RayInitConfig(BaseConfig):
    """`ray_init`: arguments of `ray.init`."""

    num_cpus: int | None = None
    timeline_json_file: str | None = None
    include_dashboard: bool | None = None
