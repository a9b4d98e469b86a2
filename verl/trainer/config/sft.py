"""Typed SFT config: `SFTConfig.from_config(hydra_config)` builds the `sft_trainer.yaml` tree once.

As for PPO (`verl.trainer.config.PPOConfig`), `sft_trainer.yaml` is where every default is decided; the dataclasses
mirror it (a test keeps the two equal) and add types. A section checks its own values when it is built, so a bad
value fails before any process group, model or data is touched, with a message that names the key; the checks that
need the world size or the file system are `SFTConfig.check`. Keys a `+key=value` override adds are kept as each
section's extra keys (see `verl.utils.config.BaseConfig`).

verl's SFT keys differ from the PPO roles' (``model.partial_pretrain``, ``optim.clip_grad``, ``trainer.resume_path``,
...), so the sections here are their own; ``wrap_policy`` and ``custom_cls`` reuse the PPO classes.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field

from verl.trainer.config.data import CustomClsConfig
from verl.utils.config import BaseConfig
from verl.utils.py_functional import as_list
from verl.workers.config.engine import WrapPolicyConfig
from verl.workers.config.errors import ConfigError
from verl.workers.config.model import check_gradient_checkpointing_policy

__all__ = [
    "SFTConfig",
    "SFTDataConfig",
    "SFTFSDPConfig",
    "SFTModelConfig",
    "SFTMultiTurnConfig",
    "SFTOptimConfig",
    "SFTTrainerConfig",
]

STRATEGIES = ("fsdp", "fsdp2")
LR_SCHEDULERS = ("cosine", "wsd")
TRUNCATIONS = ("error", "left", "right")


def _one_of(key: str, value, allowed: tuple[str, ...]) -> None:
    if value not in allowed:
        raise ConfigError(f"{key}={value!r} is not supported; expected one of {allowed}")


@dataclass
class SFTMultiTurnConfig(BaseConfig):
    """`data.multiturn`: conversations (a ``messages`` column) instead of prompt/response pairs."""

    enable: bool = False
    messages_key: str = "messages"
    tools_key: str = "tools"
    enable_thinking_key: str = "enable_thinking"


@dataclass
class SFTDataConfig(BaseConfig):
    """`data`: the SFT parquet files, how a row becomes tokens, and the batch sizes."""

    train_batch_size: int = 256
    micro_batch_size: int | None = None
    micro_batch_size_per_gpu: int = 4
    train_files: str | list[str] = "~/data/gsm8k/train.parquet"
    val_files: str | list[str] | None = "~/data/gsm8k/test.parquet"
    prompt_key: str = "question"
    response_key: str = "answer"
    prompt_dict_keys: str | list[str] | None = None
    response_dict_keys: str | list[str] | None = None
    multiturn: SFTMultiTurnConfig = field(default_factory=SFTMultiTurnConfig)
    max_length: int = 1024
    truncation: str = "error"
    balance_dp_token: bool = False
    chat_template: str | None = None
    custom_cls: CustomClsConfig = field(default_factory=CustomClsConfig)
    use_shm: bool = False

    def __post_init__(self) -> None:
        super().__post_init__()
        if self.chat_template is not None:
            raise ConfigError(
                "data.chat_template is not supported; leave it null and use the tokenizer's chat template"
            )
        _one_of("data.truncation", self.truncation, TRUNCATIONS)
        if self.micro_batch_size_per_gpu <= 0:
            raise ConfigError(
                f"data.micro_batch_size_per_gpu={self.micro_batch_size_per_gpu} must be a positive integer"
            )

    def check_files(self) -> None:
        """Every local file of ``train_files`` (at least one) and ``val_files`` exists; hdfs:// ones are not checked."""
        for key in ("train_files", "val_files"):
            files = as_list(getattr(self, key))
            if key == "train_files" and not files:
                raise ConfigError("data.train_files is empty; give one or more parquet files")
            for path in files:
                if not str(path).startswith("hdfs://") and not os.path.exists(os.path.expanduser(str(path))):
                    raise FileNotFoundError(f"data.{key}: {path!r} does not exist")


@dataclass
class SFTFSDPConfig(BaseConfig):
    """`model.fsdp_config`: parameter dtype, wrapping and offload of the trained model."""

    # null: fp32
    model_dtype: str | None = "fp32"
    wrap_policy: WrapPolicyConfig = field(default_factory=WrapPolicyConfig)
    cpu_offload: bool = False
    offload_params: bool = False

    @property
    def offload(self) -> bool:
        """Parameters live on the CPU between uses (both ``cpu_offload`` and ``offload_params``, as in verl)."""
        return self.cpu_offload and self.offload_params


@dataclass
class SFTModelConfig(BaseConfig):
    """`model`: the Hugging Face model fine-tuned, its FSDP wrapping, LoRA and kernel patches."""

    partial_pretrain: str = "~/models/gemma-1.1-7b-it"
    use_shm: bool = False
    fsdp_config: SFTFSDPConfig = field(default_factory=SFTFSDPConfig)
    external_lib: str | list[str] | None = None
    enable_gradient_checkpointing: bool = True
    gradient_checkpointing_policy: str = "auto"
    trust_remote_code: bool = False
    lora_rank: int = 0
    lora_alpha: int = 16
    target_modules: str | list[str] = "all-linear"
    use_liger: bool = False
    strategy: str = "fsdp2"

    def __post_init__(self) -> None:
        super().__post_init__()
        _one_of("model.strategy", self.strategy, STRATEGIES)
        check_gradient_checkpointing_policy(
            "model", self.gradient_checkpointing_policy, self.enable_gradient_checkpointing
        )
        if self.lora_rank < 0:
            raise ConfigError(f"model.lora_rank={self.lora_rank} must be >= 0 (0 trains every weight)")

    @property
    def is_lora(self) -> bool:
        return self.lora_rank > 0


@dataclass
class SFTOptimConfig(BaseConfig):
    """`optim`: AdamW, gradient clipping and the warmup-then-decay learning-rate schedule."""

    lr: float = 1e-5
    betas: list[float] = field(default_factory=lambda: [0.9, 0.95])
    weight_decay: float = 0.01
    warmup_steps_ratio: float = 0.1
    clip_grad: float = 1.0
    lr_scheduler: str = "cosine"

    def __post_init__(self) -> None:
        super().__post_init__()
        _one_of("optim.lr_scheduler", self.lr_scheduler, LR_SCHEDULERS)


@dataclass
class SFTTrainerConfig(BaseConfig):
    """`trainer`: length of the run, checkpoints, resume and tracking."""

    default_local_dir: str = "checkpoints/gsm8k-sft/test"
    default_hdfs_dir: str | None = None
    resume_path: str | None = None
    project_name: str = "gsm8k-sft"
    experiment_name: str = "test"
    # null is allowed when total_training_steps is set
    total_epochs: int | None = 4
    total_training_steps: int | None = None
    logger: str | list[str] = field(default_factory=lambda: ["console", "wandb"])
    seed: int = 1
    save_freq: int = -1
    test_freq: int = -1
    nnodes: int = 1
    n_gpus_per_node: int = 8
    max_ckpt_to_keep: int | None = None

    def __post_init__(self) -> None:
        super().__post_init__()
        if (self.total_epochs is None or self.total_epochs < 1) and self.total_training_steps is None:
            raise ConfigError(
                f"trainer.total_epochs={self.total_epochs!r} must be >= 1 (or set trainer.total_training_steps)"
            )


@dataclass
class SFTConfig(BaseConfig):
    """The whole `sft_trainer` config."""

    data: SFTDataConfig = field(default_factory=SFTDataConfig)
    model: SFTModelConfig = field(default_factory=SFTModelConfig)
    optim: SFTOptimConfig = field(default_factory=SFTOptimConfig)
    ulysses_sequence_parallel_size: int = 1
    use_remove_padding: bool = False
    trainer: SFTTrainerConfig = field(default_factory=SFTTrainerConfig)

    def __post_init__(self) -> None:
        super().__post_init__()
        sp = self.ulysses_sequence_parallel_size
        if sp < 1:
            raise ConfigError(f"ulysses_sequence_parallel_size={sp} must be a positive divisor of the world size")
        if sp > 1 and not self.use_remove_padding:
            raise ConfigError(f"ulysses_sequence_parallel_size={sp} needs use_remove_padding=True (packed sequences)")

    def check(self, world_size: int) -> None:
        """The checks that need the world size (parallel layout, batch divisibility) or the file system (data)."""
        sp = self.ulysses_sequence_parallel_size
        if world_size % sp != 0:
            raise ConfigError(
                f"ulysses_sequence_parallel_size={sp} must be a positive divisor of the world size {world_size}"
            )
        dp = world_size // sp
        batch, micro = self.data.train_batch_size, self.data.micro_batch_size_per_gpu
        if batch <= 0 or batch % dp != 0:
            raise ConfigError(
                f"data.train_batch_size={batch} must be a positive multiple of the data-parallel size {dp} "
                f"(world size {world_size} / ulysses_sequence_parallel_size {sp})"
            )
        if (batch // dp) % micro != 0:
            raise ConfigError(
                f"data.train_batch_size={batch} / dp={dp} = {batch // dp} samples per rank is not divisible by "
                f"data.micro_batch_size_per_gpu={micro}"
            )
        self.data.check_files()
