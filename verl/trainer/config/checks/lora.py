"""Config checks of the FSDP engine's LoRA keys (``<model>.lora_rank`` and its siblings), before Ray starts."""

from __future__ import annotations

import os

__all__ = ["check_lora"]


def check_lora(config, use_critic: bool, check_paths: bool = True) -> list[str]:
    """The problems of the policy's (and, when it runs, the critic's) LoRA keys: ``exclude_modules`` and
    ``lora_adapter_path`` act only on adapters, so they need ``lora_rank > 0``; a local adapter folder must hold a
    PEFT adapter (``adapter_config.json``). ``config``: the typed PPO config."""
    models = [("actor_rollout_ref.model", config.actor_rollout_ref.model)]
    models += [("critic.model", config.critic.model)] if use_critic else []
    problems = []
    for key, model in models:
        for name in ("exclude_modules", "lora_adapter_path"):
            value = getattr(model, name)
            if value not in (None, "", []) and not model.is_lora:
                problems.append(
                    f"{key}.{name}={value!r} with {key}.lora_rank=0: it applies to LoRA adapters only; set "
                    f"{key}.lora_rank > 0 (e.g. 16), or leave {name} null"
                )
        path = model.lora_adapter_path
        if check_paths and path and model.is_lora and not str(path).startswith("hdfs://"):
            local = os.path.expanduser(str(path))
            if not os.path.isfile(os.path.join(local, "adapter_config.json")):
                problems.append(
                    f"{key}.lora_adapter_path={path!r} is not a saved PEFT adapter (no adapter_config.json there); "
                    "give the folder a LoRA checkpoint's lora_adapter/ or PEFT's save_pretrained wrote"
                )
    return problems
