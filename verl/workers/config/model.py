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
    "RewardModelModelConfig",
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
class HFModelConfig(BaseConfig):
    """`actor_rollout_ref.model`: the policy model (actor, rollout and reference load the same one)."""

    path: str = "~/models/deepseek-llm-7b-chat"
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
    use_liger: bool = False
    use_fused_kernels: bool = False
    fused_kernel_options: FusedKernelOptions = field(default_factory=FusedKernelOptions)
    trust_remote_code: bool = False

    @property
    def is_lora(self) -> bool:
        return self.lora_rank > 0


@dataclass
class CriticModelConfig(BaseConfig):
    """`critic.model`: the value model (a token-classification head with one label)."""

    path: str = "~/models/deepseek-llm-7b-chat"
    use_shm: bool = False
    tokenizer_path: str | None = "~/models/deepseek-llm-7b-chat"
    override_config: dict = field(default_factory=dict)
    external_lib: str | list[str] | None = None
    enable_gradient_checkpointing: bool = True
    gradient_checkpointing_policy: str = "auto"
    enable_activation_offload: bool = False
    use_remove_padding: bool = True
    trust_remote_code: bool = False
    fsdp_config: FSDPConfig = field(default_factory=FSDPConfig)
    lora_rank: int = 0
    lora_alpha: int = 16
    target_modules: str | list[str] = "all-linear"

    @property
    def is_lora(self) -> bool:
        return self.lora_rank > 0


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
