"""The engine blocks of a role: FSDP sharding (`fsdp_config`, engine/fsdp.yaml) and Megatron-core parallelism
(`megatron`, engine/megatron.yaml)."""

from __future__ import annotations

from dataclasses import dataclass, field

from verl.utils.config import BaseConfig

__all__ = ["FSDPConfig", "FSDPEngineConfig", "McoreEngineConfig", "MegatronConfig", "WrapPolicyConfig"]


@dataclass
class WrapPolicyConfig(BaseConfig):
    """Which modules FSDP wraps: by parameter count (`min_num_params > 0`) or the model's layer classes (0)."""

    min_num_params: int = 0


@dataclass
class FSDPConfig(BaseConfig):
    """`*.fsdp_config`: sharding, offload and prefetch of one FSDP model."""

    wrap_policy: WrapPolicyConfig = field(default_factory=WrapPolicyConfig)
    param_offload: bool = False
    optimizer_offload: bool = False
    offload_policy: bool = False
    reshard_after_forward: bool = True
    fsdp_size: int = -1
    forward_prefetch: bool = False
    model_dtype: str | None = None
    mixed_precision: dict | None = None


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
