"""Settings the PPO workers cannot honour yet, refused before Ray starts instead of failing (or being ignored) later.

Each entry names the key, the value and what to use instead. When a feature lands, its entry goes.
"""

from __future__ import annotations

from verl.utils.batch_sizes import ConfigError

__all__ = ["check_runtime_support"]


def check_runtime_support(config, use_critic: bool, use_ref: bool) -> None:
    """Raise ConfigError for the first setting the runtime would not honour (``config``: the typed PPO config)."""
    arr = config.actor_rollout_ref
    sections = [("actor_rollout_ref.actor", arr.actor)]
    if use_ref:
        sections.append(("actor_rollout_ref.ref", arr.ref))
    if use_critic:
        sections.append(("critic", config.critic))
    for key, section in sections:
        sp = section.ulysses_sequence_parallel_size
        if sp and sp > 1:
            raise ConfigError(
                f"{key}.ulysses_sequence_parallel_size={sp}: sequence parallelism is not implemented in the PPO "
                "workers yet (the SFT trainer has it); use 1"
            )
    models = [("actor_rollout_ref.model", arr.model)] + ([("critic.model", config.critic.model)] if use_critic else [])
    for key, model in models:
        if model.enable_activation_offload:
            raise ConfigError(
                f"{key}.enable_activation_offload=True is not implemented in the PPO workers; set it False "
                "(enable_gradient_checkpointing=True saves activation memory)"
            )
    model = arr.model
    if model.use_liger:
        raise ConfigError(
            "actor_rollout_ref.model.use_liger=True: the Liger kernels are applied only by the SFT trainer here; "
            "set it False for PPO"
        )
    if model.use_fused_kernels:
        raise ConfigError(
            "actor_rollout_ref.model.use_fused_kernels=True is not implemented (log-probs come from chunked full "
            "logits, which give the same values); set it False"
        )
