"""What ``strategy=megatron`` runs here, checked in the driver before Ray starts.

The Megatron engine (:mod:`verl.workers.engine.megatron`) builds the policy (actor, rollout, reference), the critic
and the reward model of a Qwen2 / Qwen2.5, Qwen3 or Llama model with tensor and (virtual) pipeline parallelism, on CPU
(gloo), with the HF or vLLM rollout (the weights gathered layer by layer into either). Each role picks its strategy
and, with megatron, its parallel sizes on its own: the worker process keeps one set of megatron-core groups per size
triple (tensor, pipeline, virtual pipeline), so a Megatron critic or reward model runs beside an FSDP or Megatron
actor, and an FSDP critic beside a Megatron actor. Each setting the engine cannot honour yet is refused here with the
reason, naming the key.
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
    """The problems of the roles that run ``strategy=megatron`` (empty when none does); ``device``: the resolved
    ``trainer.device``."""
    actor_strategy = _get(config, "actor_rollout_ref.actor.strategy")
    critic_strategy, rm_strategy = _get(config, "critic.strategy"), _get(config, "reward_model.strategy")
    policy = actor_strategy == "megatron"
    value_roles = [
        key
        for used, key, strategy in ((use_critic, "critic", critic_strategy), (use_rm, "reward_model", rm_strategy))
        if used and strategy == "megatron"
    ]
    if not policy and not value_roles:
        return []
    strategy_keys = (["actor_rollout_ref.actor.strategy"] if policy else []) + [f"{k}.strategy" for k in value_roles]
    problems = []
    if importlib.util.find_spec("megatron") is None or importlib.util.find_spec("megatron.core") is None:
        problems.append(
            f"{', '.join(strategy_keys)}='megatron' needs megatron-core: pip install -e .[megatron] "
            "(or set the strategy to fsdp2)"
        )
    if device != "cpu":
        problems.append(
            f"trainer.device={device!r} with {', '.join(strategy_keys)}=megatron: the Megatron engine keeps its model "
            "on the CPU so far (no accelerator has run it yet); set trainer.device=cpu or strategy=fsdp2"
        )
    if policy:
        problems += _check_policy(config, n_gpus)
    for key in value_roles:
        problems += _check_value_role(config, key, n_gpus)
    return problems


def _check_ulysses(config, key: str) -> list[str]:
    sp = _get(config, f"{key}.ulysses_sequence_parallel_size") or 1
    if sp == 1:
        return []
    return [
        f"{key}.ulysses_sequence_parallel_size={sp}: Ulysses is the FSDP engine's sequence parallelism; with "
        f"strategy=megatron set it to 1 and use {key}.megatron.tensor_model_parallel_size"
    ]


def _packing_problem(config, model_key: str, strategy_key: str) -> list[str]:
    """``use_remove_padding=True`` on a Megatron model: refused. megatron-core 0.16.1's DotProductAttention asserts
    packed_seq_params is None; packing needs TransformerEngine's attention, which is CUDA-only."""
    if not _get(config, f"{model_key}.use_remove_padding"):
        return []
    return [
        f"{model_key}.use_remove_padding=True with {strategy_key}=megatron: the Megatron engine runs padded micro "
        "batches (it builds megatron-core's local layer spec, whose attention takes no packed sequences); set it "
        "False (the padded forward gives the same values; ppo_megatron_trainer.yaml does) or use strategy=fsdp2"
    ]


def _check_settings(config, key: str, n_gpus: int, trainable: bool) -> list[str]:
    from verl.workers.engine.megatron.settings import check_megatron_settings, megatron_settings

    try:
        check_megatron_settings(megatron_settings(_get(config, key)), f"{key}.megatron", n_gpus, trainable=trainable)
    except (ValueError, TypeError) as exc:
        return [str(exc)]
    return []


def _check_policy(config, n_gpus: int) -> list[str]:
    """The problems of a Megatron actor and its reference (each may have its own parallel sizes: every size pair
    gets its own megatron-core groups in the worker, see ``verl.workers.engine.megatron.parallel``)."""
    problems = []
    if (_get(config, "actor_rollout_ref.model.lora_rank") or 0) > 0:
        problems.append("actor_rollout_ref.model.lora_rank > 0 with strategy=megatron: LoRA is FSDP-only; set it to 0")
    # the actor's own switch follows the model's (verl 0.9): one problem for whichever is on
    problems += _packing_problem(config, "actor_rollout_ref.model", "actor_rollout_ref.actor.strategy") or (
        _packing_problem(config, "actor_rollout_ref.actor", "actor_rollout_ref.actor.strategy")
    )
    for key in ("actor_rollout_ref.model.use_fused_kernels", "actor_rollout_ref.actor.use_fused_kernels"):
        if _get(config, key):
            problems.append(f"{key}=True is an FSDP-engine option; set it to False with megatron")
            break
    if _get(config, "actor_rollout_ref.model.use_liger"):
        problems.append(
            "actor_rollout_ref.model.use_liger=True is an FSDP-engine option (Liger's kernels patch Hugging Face "
            "modules, and megatron-core builds its own); set it to False with megatron, it only changes speed"
        )
    for section in ("actor", "ref"):
        key = f"actor_rollout_ref.{section}"
        problems += _check_ulysses(config, key)
        problems += _check_settings(config, key, n_gpus, trainable=section == "actor")
    return problems


def _check_value_role(config, key: str, n_gpus: int) -> list[str]:
    """The problems of a Megatron critic (``key="critic"``) or reward model (``"reward_model"``), beside an actor of
    either strategy and at parallel sizes of its own."""
    problems = _check_ulysses(config, key) + _packing_problem(config, f"{key}.model", f"{key}.strategy")
    if (_get(config, f"{key}.model.lora_rank") or 0) > 0:
        problems.append(f"{key}.model.lora_rank > 0 with strategy=megatron: LoRA is FSDP-only; set it to 0")
    return problems + _check_settings(config, key, n_gpus, trainable=key == "critic")


def check_megatron_model(config, hf_config, path_key: str, section: str = "actor_rollout_ref.actor") -> None:
    """Raise ConfigError when a role's model (``section``: ``actor_rollout_ref.actor``, ``critic`` or
    ``reward_model``; ``path_key`` its model path's key) cannot be built by the Megatron engine at this
    parallelism."""
    if _get(config, f"{section}.strategy") != "megatron":
        return
    from verl.workers.engine.megatron.model import check_supported, num_experts
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
    if num_experts(hf_config) and tp > 1 and not settings.sequence_parallel:
        # measured with megatron-core 0.16.1: its MoE layer raises at tensor parallel > 1 without sequence parallelism
        raise ConfigError(
            f"{section}.megatron.tensor_model_parallel_size={tp} with sequence_parallel=False and a mixture-of-experts "
            f"model ({path_key}): megatron-core's MoE layer trains at tensor parallel > 1 only with sequence "
            f"parallelism; set {section}.megatron.sequence_parallel=True (the YAML's default) or "
            f"{section}.megatron.tensor_model_parallel_size=1"
        )
    ep = settings.expert_model_parallel_size
    if num_experts(hf_config) and tp > 1 and ep > 1:
        raise ConfigError(
            f"{section}.megatron.expert_model_parallel_size={ep} with tensor_model_parallel_size={tp} ({path_key}): "
            "experts split over both tensor- and expert-parallel ranks are not tested in this engine yet; set one "
            "of them to 1"
        )
    if ep > 1 and (not num_experts(hf_config) or num_experts(hf_config) % ep):
        raise ConfigError(
            f"{section}.megatron.expert_model_parallel_size={ep} must divide the model's routed experts "
            f"({num_experts(hf_config)}; a dense model has none: set it to 1) ({path_key})"
        )
    vpp = settings.virtual_pipeline_model_parallel_size or 1
    if hf_config.num_hidden_layers % (pp * vpp):
        raise ConfigError(
            f"{section}.megatron.virtual_pipeline_model_parallel_size={vpp} x pipeline_model_parallel_size={pp} must "
            f"divide the model's {hf_config.num_hidden_layers} layers (each model chunk holds the same number of "
            f"layers) ({path_key})"
        )
