"""`reward_model`: a model-based reward, the reward manager, and sandboxed code scoring."""

from __future__ import annotations

from dataclasses import dataclass, field

from verl.utils.config import BaseConfig
from verl.utils.debug import ProfilerConfig
from verl.workers.config.model import RewardModelModelConfig

__all__ = [
    "RATE_LIMIT_KEYS",
    "OverlongBufferConfig",
    "RewardCombineConfig",
    "RewardModelConfig",
    "RewardJudgeConfig",
    "RewardModelRolloutConfig",
    "RewardSourceConfig",
    "SandboxFusionConfig",
]

# reward_model keys that only the rate_limited manager reads (its constructor takes them by these names)
RATE_LIMIT_KEYS = ("max_concurrent", "max_rpm", "max_tpm", "estimated_tokens_per_request", "timeout")


@dataclass
class OverlongBufferConfig(BaseConfig):
    """`reward_model.overlong_buffer` (DAPO): a linear penalty on responses that run into the last `len` tokens."""

    enable: bool = False
    len: int = 4096
    penalty_factor: float = 1.0
    log: bool = False


@dataclass
class SandboxFusionConfig(BaseConfig):
    """`reward_model.sandbox_fusion`: a Sandbox Fusion service that runs code for code datasets."""

    url: str | None = None
    max_concurrent: int = 64
    memory_limit_mb: int = 1024


@dataclass
class RewardModelRolloutConfig(BaseConfig):
    """`reward_model.rollout` (verl's reward loop): the engine serving a generative reward model's replicas."""

    name: str | None = None
    dtype: str = "bfloat16"
    tensor_model_parallel_size: int = 2
    prompt_length: int = 2048
    response_length: int = 2048
    gpu_memory_utilization: float = 0.5


@dataclass
class RewardJudgeConfig(BaseConfig):
    """`reward_model.judge` (ours): the served generative judge's own model, so that `reward_model.model.path` can be
    a discriminative reward model served beside it (verl has one path for both)."""

    path: str | None = None


@dataclass
class RewardSourceConfig(BaseConfig):
    """One entry of `reward_model.reward_sources` (ours): a named reward source of a hybrid reward.

    ``type=function``: ``function`` from the file ``path`` (null path: custom_reward_function, else the built-in rules),
    scored by the configured reward manager; ``type=reward_model``: the reward-model worker's score (rm_scores)."""

    name: str = "rule"
    type: str = "function"
    weight: float = 1.0
    path: str | None = None
    function: str = "compute_score"


@dataclass
class RewardCombineConfig(BaseConfig):
    """`reward_model.reward_combine` (ours): ``name`` in the file ``path`` combines the sources' per-sample scores;
    null path: their weighted sum."""

    path: str | None = None
    name: str = "combine"


@dataclass
class RewardModelConfig(BaseConfig):
    """`reward_model`."""

    enable: bool = False
    strategy: str = "fsdp"
    model: RewardModelModelConfig = field(default_factory=RewardModelModelConfig)
    micro_batch_size: int | None = None
    micro_batch_size_per_gpu: int | None = None
    max_length: int | None = None
    ulysses_sequence_parallel_size: int = 1
    use_dynamic_bsz: bool = False
    forward_max_token_len_per_gpu: int = 32768
    reward_manager: str = "naive"
    launch_reward_fn_async: bool = False
    sandbox_fusion: SandboxFusionConfig = field(default_factory=SandboxFusionConfig)
    profiler: ProfilerConfig = field(default_factory=ProfilerConfig)
    reward_kwargs: dict = field(default_factory=dict)
    truncation: str = "right"
    overlong_buffer: OverlongBufferConfig = field(default_factory=OverlongBufferConfig)
    max_concurrent: int = 1
    max_rpm: float | None = None
    max_tpm: float | None = None
    estimated_tokens_per_request: int = 2000
    timeout: float = 300.0
    use_reward_loop: bool = False
    enable_resource_pool: bool = False
    n_gpus_per_node: int = 0
    nnodes: int = 0
    num_workers: int = 8
    rollout: RewardModelRolloutConfig = field(default_factory=RewardModelRolloutConfig)
    judge: RewardJudgeConfig = field(default_factory=RewardJudgeConfig)
    reward_sources: list[RewardSourceConfig] = field(default_factory=list)
    reward_combine: RewardCombineConfig = field(default_factory=RewardCombineConfig)
