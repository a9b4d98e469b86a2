"""The engine blocks of a role: FSDP sharding (`fsdp_config`, engine/fsdp.yaml) and Megatron-core parallelism
(`megatron`, engine/megatron.yaml)."""

from __future__ import annotations

from dataclasses import dataclass, field

from verl.utils.config import BaseConfig

__all__ = [
    "FSDPConfig",
    "FSDPEngineConfig",
    "McoreEngineConfig",
    "MegatronConfig",
    "QATEngineConfig",
    "RefFSDPConfig",
    "WrapPolicyConfig",
    "precision_name",
]

# spellings of one floating-point type in dtype keys (torch's names, verl's short ones)
_PRECISIONS = {
    "bf16": "bf16",
    "bfloat16": "bf16",
    "fp16": "fp16",
    "float16": "fp16",
    "half": "fp16",
    "fp32": "fp32",
    "float32": "fp32",
    "float": "fp32",
}


def precision_name(value) -> str:
    """``value`` (``"bfloat16"``, ``"bf16"``, ``torch.bfloat16``, ...) as bf16, fp16 or fp32; other values as given."""
    name = str(value).removeprefix("torch.")
    return _PRECISIONS.get(name, name)


@dataclass
class WrapPolicyConfig(BaseConfig):
    """Which modules FSDP wraps: by parameter count (`min_num_params > 0`) or the model's layer classes (0)."""

    min_num_params: int = 0


@dataclass
class QATEngineConfig(BaseConfig):
    """`*.fsdp_config.qat`: verl's quantization-aware training; not implemented here (only its defaults pass)."""

    enable: bool = False
    mode: str = "w4a16"
    group_size: int = 16
    ignore_patterns: list[str] = field(default_factory=lambda: ["lm_head", "embed_tokens", "re:.*mlp.gate$"])
    activation_observer: str = "static_minmax"
    quantization_config_path: str | None = None


def _turbo_config() -> dict:
    return {
        "distributed": {
            "fully_shard_parallel_size": 16,
            "tensor_parallel_size": 1,
            "expert_parallel_size": 1,
            "expert_fully_shard_parallel_size": 1,
            "ulysses_parallel_size": 1,
            "fsdp_plan": {
                "param_dtype": "bf16",
                "reduce_dtype": "fp32",
                "output_dtype": "bf16",
                "fsdp_implementation": "native",
                "num_to_forward_prefetch": 1,
                "num_to_backward_prefetch": 1,
            },
        }
    }


@dataclass
class FSDPConfig(BaseConfig):
    """`*.fsdp_config` (and `critic.fsdp`): sharding, offload, precision and the forward's options of one FSDP model.

    `dtype` (verl 0.9) is the compute dtype of the default mixed precision: a value other than its default becomes
    `mixed_precision.param_dtype` when that is not given (the two set to different types are refused).
    """

    wrap_policy: WrapPolicyConfig = field(default_factory=WrapPolicyConfig)
    param_offload: bool = False
    optimizer_offload: bool = False
    offload_policy: bool = False
    reshard_after_forward: bool = True
    fsdp_size: int = -1
    forward_prefetch: bool = False
    model_dtype: str | None = None
    mixed_precision: dict | None = None
    use_orig_params: bool = False
    seed: int = 42
    full_determinism: bool = False
    ulysses_sequence_parallel_size: int = 1
    entropy_from_logits_with_chunking: bool = False
    entropy_from_logits_chunk_size: int = 2048
    use_torch_compile: bool = True
    entropy_checkpointing: bool = False
    use_no_sync_for_gradient_accumulation: bool = False
    pad_to_length: bool = False
    pad_to_length_bucket: int = 1024
    forward_only: bool = False
    strategy: str = "fsdp"
    dtype: str = "bfloat16"
    qat: QATEngineConfig = field(default_factory=QATEngineConfig)
    turbo_config: dict = field(default_factory=_turbo_config)

    def __post_init__(self) -> None:
        super().__post_init__()
        default_dtype = precision_name(type(self).__dataclass_fields__["dtype"].default)
        dtype = precision_name(self.dtype)
        if dtype == default_dtype:
            return
        mixed = dict(self.mixed_precision or {})
        given = mixed.get("param_dtype")
        if given is None:
            mixed["param_dtype"] = self.dtype
            self.mixed_precision = mixed
        elif precision_name(given) != dtype:
            conflicts = self.__dict__.setdefault("_alias_conflicts", [])
            conflicts.append(("dtype", self.dtype, "mixed_precision.param_dtype", given))


@dataclass
class RefFSDPConfig(FSDPConfig):
    """`actor_rollout_ref.ref.fsdp_config`: as the actor's, for a model that only runs forwards."""

    forward_only: bool = True


@dataclass
class MegatronConfig(BaseConfig):
    """`*.megatron` (`ppo_megatron_trainer.yaml`): parallelism, offload and checkpoint layout of one Megatron model."""

    param_offload: bool = False
    grad_offload: bool = False
    optimizer_offload: bool = False
    tensor_model_parallel_size: int = 1
    expert_model_parallel_size: int = 1
    expert_tensor_parallel_size: int | None = None
    pipeline_model_parallel_size: int = 1
    virtual_pipeline_model_parallel_size: int | None = None
    context_parallel_size: int = 1
    sequence_parallel: bool = True
    use_distributed_optimizer: bool = True
    use_dist_checkpointing: bool = False
    dist_checkpointing_path: str | None = None
    seed: int = 42
    override_transformer_config: dict = field(default_factory=dict)

    @property
    def model_parallel_size(self) -> int:
        """Ranks that run the same rows: tensor x pipeline x context parallel, and the Megatron engine's expert-
        parallel peers (each holds other experts of the same layers)."""
        sizes = self.tensor_model_parallel_size * self.pipeline_model_parallel_size * self.context_parallel_size
        return sizes * self.expert_model_parallel_size


# verl's names of the two engine blocks (the `_target_`s of engine/fsdp.yaml and engine/megatron.yaml)
FSDPEngineConfig = FSDPConfig
McoreEngineConfig = MegatronConfig
