"""The `model:` sections: which Hugging Face model a role loads and how it is patched."""

from __future__ import annotations

from dataclasses import dataclass, field

from verl.utils.config import BaseConfig
from verl.workers.config.engine import FSDPConfig
from verl.workers.config.errors import ConfigError

__all__ = [
    "GRADIENT_CHECKPOINTING_POLICIES",
    "CriticModelConfig",
    "FusedKernelOptions",
    "HFModelConfig",
    "MegatronLoraConfig",
    "MtpConfig",
    "RewardModelModelConfig",
    "TiledMlpConfig",
    "check_gradient_checkpointing_policy",
]

# how checkpointed layers recompute in the backward (verl.workers.engine.fsdp.activation_checkpointing)
GRADIENT_CHECKPOINTING_POLICIES = ("auto", "full", "selective")


def check_gradient_checkpointing_policy(key: str, policy: str, enabled: bool) -> None:
    """``{key}.gradient_checkpointing_policy``: one of the policies, and ``selective`` only with checkpointing on
    (``enabled``, ``{key}.enable_gradient_checkpointing``). ``auto`` is valid everywhere: it is full recompute
    wherever selective is not possible."""
    if policy not in GRADIENT_CHECKPOINTING_POLICIES:
        raise ConfigError(
            f"{key}.gradient_checkpointing_policy={policy!r} is not supported; expected one of "
            f"{list(GRADIENT_CHECKPOINTING_POLICIES)}"
        )
    if policy == "selective" and not enabled:
        raise ConfigError(
            f"{key}.gradient_checkpointing_policy=selective with {key}.enable_gradient_checkpointing=False: nothing "
            "is checkpointed; set enable_gradient_checkpointing=True, or leave the policy at auto"
        )


@dataclass
class FusedKernelOptions(BaseConfig):
    """Options of the fused log-prob/entropy head."""

    impl_backend: str = "torch"


@dataclass
class TiledMlpConfig(BaseConfig):
    """`model.tiled_mlp`: the MLP computed in slices of the sequence to lower peak memory (verl; refused when on)."""

    enabled: bool = False
    num_shards: int = 4


@dataclass
class MtpConfig(BaseConfig):
    """`model.mtp`: a model's multi-token-prediction layers, trained and used for speculative decoding (verl; not
    implemented here, so only its defaults are accepted)."""

    enable: bool = False
    enable_train: bool = False
    enable_rollout: bool = False
    detach_encoder: bool = False
    mtp_loss_scaling_factor: float = 0.1
    speculative_algorithm: str = "EAGLE"
    speculative_num_steps: int = 3
    speculative_eagle_topk: int = 1
    speculative_num_draft_tokens: int = 4
    method: str = "mtp"
    num_speculative_tokens: int = 1


@dataclass
class MegatronLoraConfig(BaseConfig):
    """`model.lora`: verl's LoRA of the Megatron engine (megatron-bridge). LoRA here is the FSDP engine's (`lora_rank`
    and its siblings); only `merge` is honoured (the hand-off always merges), the other keys only at their defaults."""

    type: str = "lora"
    merge: bool = False
    rank: int = 0
    alpha: int = 32
    dropout: float = 0.0
    target_modules: list[str] = field(default_factory=lambda: ["linear_qkv", "linear_proj", "linear_fc1", "linear_fc2"])
    exclude_modules: list[str] = field(default_factory=list)
    dropout_position: str = "pre"
    lora_A_init_method: str = "xavier"
    lora_B_init_method: str = "zero"
    a2a_experimental: bool = False
    dtype: str | None = None
    adapter_path: str | None = None
    freeze_vision_model: bool = True
    freeze_vision_projection: bool = True
    freeze_language_model: bool = True


@dataclass
class HFModelConfig(BaseConfig):
    """`actor_rollout_ref.model`: the policy model (actor, rollout and reference load the same one)."""

    path: str = "~/models/deepseek-llm-7b-chat"
    hf_config_path: str | None = None
    tokenizer_path: str | None = None
    custom_chat_template: str | None = None
    use_shm: bool = False
    external_lib: str | list[str] | None = None
    override_config: dict = field(default_factory=dict)
    enable_gradient_checkpointing: bool = True
    gradient_checkpointing_policy: str = "auto"
    enable_activation_offload: bool = False
    use_remove_padding: bool = True
    lora_rank: int = 0
    lora_alpha: int = 16
    target_modules: str | list[str] = "all-linear"
    exclude_modules: str | list[str] | None = None
    lora_adapter_path: str | None = None
    use_liger: bool = False
    use_fused_kernels: bool = False
    fused_kernel_options: FusedKernelOptions = field(default_factory=FusedKernelOptions)
    trust_remote_code: bool = False
    tiled_mlp: TiledMlpConfig = field(default_factory=TiledMlpConfig)
    mtp: MtpConfig = field(default_factory=MtpConfig)
    lora: MegatronLoraConfig = field(default_factory=MegatronLoraConfig)

    @property
    def is_lora(self) -> bool:
        return self.lora_rank > 0


@dataclass
class CriticModelConfig(HFModelConfig):
    """`critic.model`: the value model (a token-classification head with one label). The node is model/hf_model.yaml
    (verl 0.9) with verl v0.4's critic keys on top: the tokenizer defaults to the policy's, and `fsdp_config`."""

    tokenizer_path: str | None = "~/models/deepseek-llm-7b-chat"
    fsdp_config: FSDPConfig = field(default_factory=FSDPConfig)


@dataclass
class RewardModelModelConfig(BaseConfig):
    """`reward_model.model`: a sequence-scoring model."""

    input_tokenizer: str | None = "~/models/deepseek-llm-7b-chat"
    path: str = "~/models/FsfairX-LLaMA3-RM-v0.1"
    use_shm: bool = False
    external_lib: str | list[str] | None = None
    use_remove_padding: bool = False
    use_fused_kernels: bool = False
    trust_remote_code: bool = False
    fsdp_config: FSDPConfig = field(default_factory=FSDPConfig)
