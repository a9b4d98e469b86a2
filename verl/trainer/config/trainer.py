"""`trainer` and `ray_init`: the training loop and its surroundings (`CustomRewardFunctionConfig`, re-exported here,
lives with the reward's sections in `verl.workers.config.reward`)."""

from __future__ import annotations

from dataclasses import dataclass, field

from verl.utils.config import BaseConfig
from verl.workers.config.reward import CustomRewardFunctionConfig

__all__ = [
    "CustomRewardFunctionConfig",
    "HybridRolloutSwitchConfig",
    "RayInitConfig",
    "RayKwargsConfig",
    "RolloutPoolConfig",
    "TrainerConfig",
    "TransferQueueConfig",
    "V1TrainerConfig",
    "WORKER_IMPLEMENTATIONS",
]

# verl 0.7's trainer.use_legacy_worker_impl values: verl's older worker classes (auto, enable) or its engine-based
# ones (disable). This project has one worker implementation, which every value selects.
WORKER_IMPLEMENTATIONS = ("auto", "enable", "disable")

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
class HybridRolloutSwitchConfig(BaseConfig):
    """`trainer.v1.separate_async.hybrid_rollout`: verl 0.9's lending of idle trainer devices to the rollout (its
    separate_async mode; not run here)."""

    enable_switch: bool = False
    switch_threshold_ratio: float = 0.4
    adaptive_switch_threshold: bool = True
    switch_threshold_step_up: float = 0.05
    switch_threshold_step_down: float = 0.03
    switch_threshold_release_steps: int = 2
    switch_cost_window_size: int = 3


@dataclass
class SeparateAsyncConfig(BaseConfig):
    """`trainer.v1.separate_async` (not run here)."""

    num_warmup_batches: float = 1
    parameter_sync_step: int = 4
    hybrid_rollout: HybridRolloutSwitchConfig = field(default_factory=HybridRolloutSwitchConfig)


@dataclass
class ReplaySamplerConfig(BaseConfig):
    """`trainer.v1.sampler`: the replay-buffer sampling of verl 0.9's asynchronous modes (not run here)."""

    max_off_policy_threshold: int | None = 8
    max_off_policy_strategy: str = "drop"
    sync_refill_failed_groups: bool = False
    custom_sampler: dict = field(default_factory=lambda: {"path": None, "name": None})
    sampler_kwargs: dict = field(default_factory=dict)


@dataclass
class V1TrainerConfig(BaseConfig):
    """`trainer.v1`: verl 0.9's trainer modes; `trainer_mode=sync` (the default) is this project's trainer, the
    others are refused (checks.unsupported_keys)."""

    trainer_mode: str = "sync"
    sync: dict = field(default_factory=dict)
    colocate_async: dict = field(default_factory=lambda: {"num_warmup_batches": 1})
    separate_async: SeparateAsyncConfig = field(default_factory=SeparateAsyncConfig)
    sampler: ReplaySamplerConfig = field(default_factory=ReplaySamplerConfig)


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
    esi_redundant_time: float = 0
    resume_mode: str = "auto"
    resume_from_path: str | None = None
    checkpoint_callback_class: str | None = None
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
    use_v1: bool = True
    v1: V1TrainerConfig = field(default_factory=V1TrainerConfig)
    # verl 0.7: which of its worker implementations to run (every value selects this project's one)
    use_legacy_worker_impl: str = "auto"

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


@dataclass
class RayRuntimeEnvConfig(BaseConfig):
    """`ray_kwargs.ray_init.runtime_env`: entries merged into the job's Ray runtime_env."""

    py_executable: str | None = None


@dataclass
class RayKwargsInitConfig(BaseConfig):
    """`ray_kwargs.ray_init`."""

    num_cpus: int | None = None
    runtime_env: RayRuntimeEnvConfig = field(default_factory=RayRuntimeEnvConfig)


@dataclass
class RayKwargsConfig(BaseConfig):
    """`ray_kwargs`: verl 0.9's home of `ray_init` (num_cpus and timeline_json_file are the same keys; use
    `ray_init_options` for the values in force)."""

    ray_init: RayKwargsInitConfig = field(default_factory=RayKwargsInitConfig)
    timeline_json_file: str | None = None


def _one_value(old_key: str, old, new_key: str, new):
    """The value of a key spelled two ways: whichever is set; both set, they must agree."""
    from verl.workers.config.errors import ConfigError

    if old is not None and new is not None and old != new:
        raise ConfigError(
            f"{old_key}={old!r} and {new_key}={new!r} are one setting under two names (verl v0.4's and verl 0.9's); "
            "set one of them, or both to the same value"
        )
    return old if old is not None else new


def ray_init_options(config) -> RayInitConfig:
    """`ray_init` with `ray_kwargs` (verl 0.9's spelling of it) folded in; ``config``: the typed PPO config."""
    old, new = config.ray_init, config.ray_kwargs
    return RayInitConfig(
        num_cpus=_one_value("ray_init.num_cpus", old.num_cpus, "ray_kwargs.ray_init.num_cpus", new.ray_init.num_cpus),
        timeline_json_file=_one_value(
            "ray_init.timeline_json_file",
            old.timeline_json_file,
            "ray_kwargs.timeline_json_file",
            new.timeline_json_file,
        ),
        include_dashboard=old.include_dashboard,
    )


def profile_steps(config) -> list[int] | None:
    """The steps to profile: `trainer.profile_steps` or verl 0.9's `global_profiler.steps` (the same setting)."""
    old, new = config.trainer.profile_steps, config.global_profiler.steps
    return _one_value("trainer.profile_steps", old, "global_profiler.steps", new)


# the sections whose `profiler` block a worker builds its profiler from
PROFILED_SECTIONS = (
    "actor_rollout_ref.actor",
    "actor_rollout_ref.ref",
    "actor_rollout_ref.rollout",
    "critic",
    "reward_model",
)


def apply_global_profiler(config) -> None:
    """Give each role's profiler without a `save_path` the trainer-wide one (`global_profiler.save_path`), as verl 0.9's
    YAML does by interpolation; ``config``: the typed PPO config, before the workers are built from it."""
    for section in PROFILED_SECTIONS:
        node = config
        for part in section.split("."):
            node = getattr(node, part)
        if node.profiler.save_path is None:
            node.profiler.save_path = config.global_profiler.save_path


@dataclass
class TransferQueueMetricsConfig(BaseConfig):
    """`transfer_queue.metrics`."""

    enabled: bool = False
    port: int = 0


@dataclass
class TransferQueueConfig(BaseConfig):
    """`transfer_queue`: verl 0.9's data plane of its asynchronous trainers (not run here; defaults only)."""

    enable: bool = False
    metrics: TransferQueueMetricsConfig = field(default_factory=TransferQueueMetricsConfig)
    backend: dict = field(
        default_factory=lambda: {
            "storage_backend": "SimpleStorage",
            "SimpleStorage": {"total_storage_size": 100000, "num_data_storage_units": 8},
            "MooncakeStore": {
                "auto_init": False,
                "metadata_server": "localhost:50123",
                "master_server_address": "localhost:50124",
                "local_hostname": "localhost",
                "protocol": "tcp",
                "global_segment_size": 4294967296,
                "local_buffer_size": 1073741824,
                "device_name": "",
            },
        }
    )
