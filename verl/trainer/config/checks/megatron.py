"""What ``strategy=megatron`` runs here, checked in the driver before Ray starts.

The Megatron engine (:mod:`verl.workers.engine.megatron`) builds the policy (actor, rollout, reference), the critic
and the reward model of a Qwen2 / Qwen2.5 or Llama model with tensor and pipeline parallelism, on CPU (gloo), with
the HF or vLLM rollout (the weights gathered layer by layer into either). All roles of a worker process share one set
of megatron-core process groups, so a Megatron critic or reward model runs beside a Megatron actor, at the actor's
tensor and pipeline sizes. Each setting it cannot honour yet is refused here with the reason, naming the key.
"""

from __future__ import annotations

import importlib.util

from verl.trainer.config import ConfigError

__all__ = ["check_megatron", "check_megatron_model"]


def _get(config, key: str):
    node = config
    for part in key.split("."):
        node = node.get(part) if hasattr(node, "get") else getattr(node, part, None)
        if node is None:
            return None
    return node


def check_megatron(config, *, n_gpus: int, use_critic: bool, use_rm: bool, device: str) -> list[str]:
    """The problems of a config whose actor runs ``strategy=megatron`` (empty when it is another strategy);
    ``device``: the resolved ``trainer.device``."""
    from verl.workers.engine.megatron.settings import check_megatron_settings, megatron_settings

    actor_strategy = _get(config, "actor_rollout_ref.actor.strategy")
    critic_strategy, rm_strategy = _get(config, "critic.strategy"), _get(config, "reward_model.strategy")
    if actor_strategy != "megatron":
        problems = []
        for used, key, strategy in ((use_critic, "critic", critic_strategy), (use_rm, "reward_model", rm_strategy)):
            if used and strategy == "megatron":
                problems.append(
                    f"{key}.strategy='megatron' needs actor_rollout_ref.actor.strategy=megatron too (the roles share "
                    f"their processes and megatron-core's process groups); set {key}.strategy={actor_strategy}"
                )
        return problems
    problems = []
    if importlib.util.find_spec("megatron") is None or importlib.util.find_spec("megatron.core") is None:
        problems.append(
            "actor_rollout_ref.actor.strategy='megatron' needs megatron-core: pip install -e .[megatron] "
            "(or set the strategy to fsdp2)"
        )
    if device != "cpu":
        problems.append(
            f"trainer.device={device!r} with strategy=megatron: the Megatron engine keeps its model on the CPU so far "
            "(no accelerator has run it yet); set trainer.device=cpu or strategy=fsdp2"
        )
    if use_critic and critic_strategy != "megatron":
        problems.append(
            f"critic.strategy={critic_strategy!r} beside actor_rollout_ref.actor.strategy=megatron: a critic of "
            "another engine in the Megatron actor's processes is not built here; set critic.strategy=megatron"
        )
    if (_get(config, "actor_rollout_ref.model.lora_rank") or 0) > 0:
        problems.append("actor_rollout_ref.model.lora_rank > 0 with strategy=megatron: LoRA is FSDP-only; set it to 0")
    if _get(config, "actor_rollout_ref.model.use_fused_kernels"):
        problems.append(
            "actor_rollout_ref.model.use_fused_kernels=True is an FSDP-engine option; set it to False with megatron"
        )
    for section in ("actor", "ref"):
        key = f"actor_rollout_ref.{section}"
        sp = _get(config, f"{key}.ulysses_sequence_parallel_size") or 1
        if sp != 1:
            problems.append(
                f"{key}.ulysses_sequence_parallel_size={sp}: Ulysses is the FSDP engine's sequence parallelism; with "
                f"strategy=megatron set it to 1 and use {key}.megatron.tensor_model_parallel_size"
            )
        try:
            settings = megatron_settings(_get(config, key))
            check_megatron_settings(settings, f"{key}.megatron", n_gpus, trainable=section == "actor")
        except (ValueError, TypeError) as exc:
            problems.append(str(exc))
    actor_m, ref_m = (megatron_settings(_get(config, f"actor_rollout_ref.{s}")) for s in ("actor", "ref"))
    sizes = ("tensor_model_parallel_size", "pipeline_model_parallel_size")
    if any(getattr(actor_m, k) != getattr(ref_m, k) for k in sizes):
        problems.append(
            "actor_rollout_ref.ref.megatron tensor/pipeline_model_parallel_size must equal the actor's (they share "
            "one set of process groups); by default the ref's follow the actor's"
        )
    for used, key, strategy in ((use_critic, "critic", critic_strategy), (use_rm, "reward_model", rm_strategy)):
        if used and strategy == "megatron":
            problems += _check_value_role(config, key, actor_m, n_gpus)
    return problems


def _check_value_role(config, key: str, actor_m, n_gpus: int) -> list[str]:
    """The problems of a Megatron critic (``key="critic"``) or reward model (``"reward_model"``) beside a Megatron
    actor."""
    from verl.workers.engine.megatron.settings import check_megatron_settings, megatron_settings

    problems = []
    sp = _get(config, f"{key}.ulysses_sequence_parallel_size") or 1
    if sp != 1:
        problems.append(
            f"{key}.ulysses_sequence_parallel_size={sp}: Ulysses is the FSDP engine's sequence parallelism; with "
            f"strategy=megatron set it to 1 and use {key}.megatron.tensor_model_parallel_size"
        )
    if (_get(config, f"{key}.model.lora_rank") or 0) > 0:
        problems.append(f"{key}.model.lora_rank > 0 with strategy=megatron: LoRA is FSDP-only; set it to 0")
    try:
        settings = megatron_settings(_get(config, key))
        check_megatron_settings(settings, f"{key}.megatron", n_gpus, trainable=key == "critic")
    except (ValueError, TypeError) as exc:
        return problems + [str(exc)]
    for size in ("tensor_model_parallel_size", "pipeline_model_parallel_size"):
        if getattr(settings, size) != getattr(actor_m, size):
            problems.append(
                f"{key}.megatron.{size}={getattr(settings, size)} differs from the actor's "
                f"({getattr(actor_m, size)}): the roles share their worker processes and one set of megatron-core "
                f"process groups; set {key}.megatron.{size}={getattr(actor_m, size)}"
            )
    return problems


def check_megatron_model(config, hf_config, path_key: str, section: str = "actor_rollout_ref.actor") -> None:
    """Raise ConfigError when a role's model (``section``: ``actor_rollout_ref.actor``, ``critic`` or
    ``reward_model``; ``path_key`` its model path's key) cannot be built by the Megatron engine at this
    parallelism."""
    if _get(config, f"{section}.strategy") != "megatron":
        return
    from verl.workers.engine.megatron.model import check_supported
    from verl.workers.engine.megatron.settings import megatron_settings

    try:
        check_supported(hf_config)
    except ValueError as exc:
        raise ConfigError(f"{path_key}: {exc}") from exc
    settings = megatron_settings(_get(config, section))
    tp, pp = settings.tensor_model_parallel_size, settings.pipeline_model_parallel_size
    heads, groups = hf_config.num_attention_heads, hf_config.num_key_value_heads
    if heads % tp or groups % tp:
        raise ConfigError(
            f"{section}.megatron.tensor_model_parallel_size={tp} must divide the model's attention "
            f"heads ({heads}) and key-value heads ({groups}) ({path_key})"
        )
    if hf_config.num_hidden_layers % pp:
        raise ConfigError(
            f"{section}.megatron.pipeline_model_parallel_size={pp} must divide the model's "
            f"{hf_config.num_hidden_layers} layers ({path_key})"
        )
