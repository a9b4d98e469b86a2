"""`distillation`: verl 0.9's on-policy distillation (teacher models' log-probs on the policy's own rollouts).

Not implemented yet: the section mirrors verl's keys and defaults so that verl's configs compose, and the config
check refuses any value other than the defaults (checks.unsupported_keys, checks.ppo).
"""

from __future__ import annotations

from dataclasses import dataclass, field

from verl.utils.config import BaseConfig

__all__ = [
    "DistillationConfig",
    "DistillationLossConfig",
    "DistillationTeacherInferenceConfig",
    "DistillationTeacherModelConfig",
    "DistillationTeacherModelsConfig",
]


@dataclass
class DistillationLossConfig(BaseConfig):
    """`distillation.distillation_loss`: which divergence to the teacher is minimised, and how."""

    loss_mode: str = "k3"
    topk: int | None = 32
    use_task_rewards: bool = True
    distillation_loss_coef: float = 1.0
    loss_max_clamp: float | None = None
    log_prob_min_clamp: float | None = None
    use_policy_gradient: bool = False
    policy_loss_mode: str = "vanilla"
    clip_ratio: float = 0.2
    clip_ratio_low: float = 0.2
    clip_ratio_high: float = 0.2


@dataclass
class DistillationTeacherInferenceConfig(BaseConfig):
    """A teacher's `inference` node: the rollout keys verl's YAML gives a teacher's engine (verl builds the node as a
    RolloutConfig, with that class's defaults for the rest)."""

    # follows the policy's rollout.name, which verl 0.9 leaves to the command line
    name: str | None = None
    dtype: str = "bfloat16"
    gpu_memory_utilization: float = 0.5
    enforce_eager: bool = True
    cudagraph_capture_sizes: list[int] | None = None
    free_cache_engine: bool = True
    data_parallel_size: int = 1
    expert_parallel_size: int = 1
    tensor_model_parallel_size: int = 2
    max_num_batched_tokens: int = 8192
    max_model_len: int | None = None
    max_num_seqs: int = 1024
    load_format: str = "auto"
    engine_kwargs: dict = field(default_factory=dict)
    limit_images: int | None = None
    enable_chunked_prefill: bool = True
    enable_prefix_caching: bool = True
    disable_log_stats: bool = True
    skip_tokenizer_init: bool = True
    prompt_length: int = 512
    response_length: int = 512
    temperature: float = 1.0


@dataclass
class DistillationTeacherModelConfig(BaseConfig):
    """One teacher: its model, the rows it serves (`key`) and its inference engine."""

    key: str | None = None
    model_path: str | None = None
    num_replicas: int | None = 0
    inference: DistillationTeacherInferenceConfig = field(default_factory=DistillationTeacherInferenceConfig)


@dataclass
class DistillationTeacherModelsConfig(BaseConfig):
    """`distillation.teacher_models`: the teachers by name (`teacher_model`, and extra keys for more)."""

    teacher_model: DistillationTeacherModelConfig = field(default_factory=DistillationTeacherModelConfig)


@dataclass
class DistillationConfig(BaseConfig):
    """`distillation`: on-policy distillation; only its defaults are accepted here."""

    enabled: bool = False
    distillation_loss: DistillationLossConfig = field(default_factory=DistillationLossConfig)
    n_gpus_per_node: int = 8
    nnodes: int = 0
    teacher_models: DistillationTeacherModelsConfig = field(default_factory=DistillationTeacherModelsConfig)
    teacher_key: str = "data_source"
