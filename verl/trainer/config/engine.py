"""Config sections the training engines share: FSDP sharding, optimizer, checkpoint contents."""

from __future__ import annotations

from dataclasses import dataclass, field

from verl.utils.config import BaseConfig

__all__ = ["CheckpointConfig", "CriticOptimConfig", "FSDPConfig", "MegatronConfig", "OptimConfig", "WrapPolicyConfig"]


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


@dataclass
class OptimConfig(BaseConfig):
    """`actor.optim`: AdamW and its learning-rate schedule."""

    lr: float = 1e-6
    lr_warmup_steps: int = -1
    lr_warmup_steps_ratio: float = 0.0
    min_lr_ratio: float | None = 0.0
    num_cycles: float = 0.5
    warmup_style: str = "constant"
    total_training_steps: int = -1
    weight_decay: float = 0.01
    betas: list[float] = field(default_factory=lambda: [0.9, 0.999])

    def warmup_steps(self) -> int:
        """`lr_warmup_steps`, or `lr_warmup_steps_ratio` of the total steps when that is negative."""
        if self.lr_warmup_steps >= 0:
            return self.lr_warmup_steps
        return int(self.lr_warmup_steps_ratio * max(self.total_training_steps, 0))


@dataclass
class CriticOptimConfig(OptimConfig):
    """`critic.optim`: as the actor's, with verl's critic defaults."""

    lr: float = 1e-5
    # null: the cosine schedule's floor is 0
    min_lr_ratio: float | None = None


@dataclass
class CheckpointConfig(BaseConfig):
    """What a checkpoint saves and what a resume loads: model, optimizer, extra, hf_model."""

    save_contents: list[str] = field(default_factory=lambda: ["model", "optimizer", "extra"])
    load_contents: list[str] = field(default_factory=lambda: ["model", "optimizer", "extra"])
