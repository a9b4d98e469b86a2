"""The reward's typed config: verl v0.4's `reward_model` and `custom_reward_function` sections (which the runtime
reads), verl 0.9's `reward` section (`RewardConfig`, whose keys are other spellings of those, resolved by
`verl.trainer.config.reward_spellings`), and the reward manager, sandbox and served-model blocks."""

from __future__ import annotations

from dataclasses import dataclass, field

from verl.utils.config import BaseConfig
from verl.utils.debug import ProfilerConfig
from verl.workers.config.model import RewardModelModelConfig

__all__ = [
    "RATE_LIMIT_KEYS",
    "CustomRewardFunctionConfig",
    "ModuleConfig",
    "OverlongBufferConfig",
    "RewardCombineConfig",
    "RewardConfig",
    "RewardManagerConfig",
    "RewardModelConfig",
    "RewardJudgeConfig",
    "RewardModelRolloutConfig",
    "RewardSourceConfig",
    "SandboxFusionAliasConfig",
    "SandboxFusionConfig",
    "ServedRewardModelConfig",
    "ServedRewardModelRolloutConfig",
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
class SandboxFusionAliasConfig(BaseConfig):
    """Top-level `sandbox_fusion` (verl 0.9's legacy place): aliases of `reward_model.sandbox_fusion`, None where
    not set."""

    url: str | None = None
    max_concurrent: int | None = None
    memory_limit_mb: int | None = None


@dataclass
class RewardModelRolloutConfig(BaseConfig):
    """`reward_model.rollout` (verl's reward loop): the engine serving a reward model's replicas. The keys after
    ``gpu_memory_utilization`` are verl 0.7's places of `reward.reward_model.rollout` keys, None where not set."""

    name: str | None = None
    dtype: str = "bfloat16"
    tensor_model_parallel_size: int = 2
    prompt_length: int = 2048
    response_length: int = 2048
    gpu_memory_utilization: float = 0.5
    enforce_eager: bool | None = None
    cudagraph_capture_sizes: list | None = None
    free_cache_engine: bool | None = None
    data_parallel_size: int | None = None
    expert_parallel_size: int | None = None
    max_num_batched_tokens: int | None = None
    max_model_len: int | None = None
    max_num_seqs: int | None = None
    load_format: str | None = None
    engine_kwargs: dict | None = None
    limit_images: int | None = None
    enable_chunked_prefill: bool | None = None
    enable_prefix_caching: bool | None = None
    disable_log_stats: bool | None = None
    skip_tokenizer_init: bool | None = None


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
    # verl 0.7's places of the reward manager's source and module (aliases, None where not set)
    reward_loop_source: str | None = None
    reward_loop_module_path: str | None = None
    reward_loop_class_name: str | None = None
    # the URL's spelling in verl's sandbox example scripts (alias of sandbox_fusion.url)
    sandbox_fusion_url: str | None = None
    rollout: RewardModelRolloutConfig = field(default_factory=RewardModelRolloutConfig)
    judge: RewardJudgeConfig = field(default_factory=RewardJudgeConfig)
    reward_sources: list[RewardSourceConfig] = field(default_factory=list)
    reward_combine: RewardCombineConfig = field(default_factory=RewardCombineConfig)


@dataclass
class CustomRewardFunctionConfig(BaseConfig):
    """`custom_reward_function` (and `reward.custom_reward_function`): a user's `compute_score` that replaces the
    built-in rules."""

    path: str | None = None
    name: str = "compute_score"
    reward_kwargs: dict = field(default_factory=dict)


@dataclass
class ModuleConfig(BaseConfig):
    """A Python file and the name it is imported under (`reward.reward_manager.module`; verl's
    `verl.trainer.config.config.ModuleConfig`)."""

    path: str | None = None
    name: str | None = "custom_reward_manager"


@dataclass
class RewardManagerConfig(BaseConfig):
    """`reward.reward_manager`: ``source=register`` looks ``name`` up among the registered managers; ``importlib``
    loads the class ``name`` from the file ``module.path``."""

    source: str = "register"
    name: str = "naive"
    module: ModuleConfig = field(default_factory=ModuleConfig)


def _disaggregation_defaults() -> dict:
    # verl's prefill/decode split; refused here unless left alone, so a plain mapping of its defaults
    return {
        "enabled": False,
        "prefill_replicas": 1,
        "decode_replicas": 1,
        "decode_tensor_model_parallel_size": None,
        "transfer_backend": "nixl",
        "bootstrap_port": None,
        "ib_device": None,
    }


@dataclass
class ServedRewardModelRolloutConfig(BaseConfig):
    """`reward.reward_model.rollout`: the engine serving the reward model, with verl 0.9's keys. Six of them are
    `reward_model.rollout`'s keys under another spelling; the others are accepted at their defaults only."""

    name: str | None = None
    dtype: str = "bfloat16"
    gpu_memory_utilization: float = 0.5
    enforce_eager: bool = True
    cudagraph_capture_sizes: list | None = None
    free_cache_engine: bool = True
    data_parallel_size: int = 1
    expert_parallel_size: int = 1
    tensor_model_parallel_size: int = 2
    pipeline_model_parallel_size: int = 1
    max_num_batched_tokens: int = 8192
    max_model_len: int | None = None
    max_num_seqs: int = 1024
    load_format: str = "auto"
    layered_summon: bool = False
    scheduling_policy: str = "fcfs"
    full_determinism: bool = False
    seed: int = 42
    multi_stage_wake_up: bool = False
    engine_kwargs: dict = field(default_factory=dict)
    limit_images: int | None = None
    enable_chunked_prefill: bool = True
    enable_prefix_caching: bool = True
    disable_log_stats: bool = True
    skip_tokenizer_init: bool = False
    ignore_eos: bool = False
    temperature: float = 1.0
    top_k: int = -1
    top_p: float = 1.0
    do_sample: bool = True
    n: int = 1
    prompt_length: int = 2048
    response_length: int = 2048
    quantization: str | None = None
    quantization_config_file: str | None = None
    mtp: dict | None = None
    disaggregation: dict = field(default_factory=_disaggregation_defaults)


@dataclass
class ServedRewardModelConfig(BaseConfig):
    """`reward.reward_model` (verl 0.9's `RewardModelConfig`; that name here is the `reward_model` section, as in verl
    0.7): every key but the engine's is a `reward_model` key under another spelling."""

    enable: bool = False
    enable_resource_pool: bool = False
    n_gpus_per_node: int = 8
    nnodes: int = 0
    model_path: str | None = None
    rollout: ServedRewardModelRolloutConfig = field(default_factory=ServedRewardModelRolloutConfig)


@dataclass
class RewardConfig(BaseConfig):
    """`reward` (verl 0.9): the reward's keys at verl 0.9's places."""

    num_workers: int = 8
    custom_reward_function: CustomRewardFunctionConfig = field(default_factory=CustomRewardFunctionConfig)
    reward_manager: RewardManagerConfig = field(default_factory=RewardManagerConfig)
    reward_model: ServedRewardModelConfig = field(default_factory=ServedRewardModelConfig)
    sandbox_fusion: SandboxFusionConfig = field(default_factory=SandboxFusionConfig)
