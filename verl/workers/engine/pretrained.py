"""A model's files made local: its folder, tokenizer, HF config (with the role's overrides) and processor.

Backend-free: every engine builds its model from these, and the role workers read the tokenizer and config (for the
rollout, the FLOPs counter and checkpoints) from them.
"""

from __future__ import annotations

from dataclasses import dataclass

from omegaconf import DictConfig, OmegaConf

__all__ = ["PretrainedFiles", "load_hf_config", "load_pretrained", "policy_auto_class"]


def load_hf_config(local_path: str, tokenizer, override_config, trust_remote_code: bool, **extra):
    """The model config with the tokenizer's special-token ids and the user's ``override_config`` applied."""
    from transformers import AutoConfig

    from verl.utils.model import update_model_config

    hf_config = AutoConfig.from_pretrained(local_path, trust_remote_code=trust_remote_code, **extra)
    overrides = {
        "bos_token_id": tokenizer.bos_token_id,
        "eos_token_id": tokenizer.eos_token_id,
        "pad_token_id": tokenizer.pad_token_id,
    }
    if override_config:
        is_omega = isinstance(override_config, DictConfig)
        overrides.update(OmegaConf.to_container(override_config) if is_omega else dict(override_config))
    update_model_config(hf_config, overrides)
    return hf_config


@dataclass
class PretrainedFiles:
    """A model's local folder, its tokenizer, its (overridden) HF config and, for a vision-language model, its
    processor; ``tokenizer_path`` / ``hf_config_path``: the local folders those came from when not ``local_path``."""

    local_path: str
    tokenizer: object
    hf_config: object
    processor: object = None
    tokenizer_path: str | None = None
    hf_config_path: str | None = None


def policy_auto_class(hf_config):
    """The transformers Auto class that loads a policy with an LM head: image-text-to-text (vision-to-sequence on
    older releases) for a model with a vision tower, causal LM otherwise."""
    import transformers

    from verl.utils.vlm_processor import is_vision_language_config

    if is_vision_language_config(hf_config):
        return getattr(transformers, "AutoModelForImageTextToText", None) or transformers.AutoModelForVision2Seq
    return transformers.AutoModelForCausalLM


def load_pretrained(
    path: str,
    *,
    use_shm: bool = False,
    trust_remote_code: bool = False,
    tokenizer_path: str | None = None,
    hf_config_path: str | None = None,
    override_config: dict | None = None,
    chat_template: str | None = None,
    **config_kwargs,
) -> PretrainedFiles:
    """Copy a model folder local (hdfs://, /dev/shm) and load its tokenizer and HF config.

    ``tokenizer_path`` (the tokenizer and a vision-language model's processor) and ``hf_config_path`` (config.json)
    are read from other folders when given (``model.tokenizer_path``, ``model.hf_config_path``). The config gets the
    tokenizer's special-token ids and ``override_config``; ``config_kwargs`` go to ``AutoConfig.from_pretrained``
    (e.g. ``num_labels=1`` for value and reward heads).
    """
    from verl.utils.fs import copy_to_local
    from verl.utils.tokenizer import hf_processor, hf_tokenizer
    from verl.utils.vlm_processor import is_vision_language_config

    local_path = copy_to_local(path, use_shm=use_shm)
    tokenizer_local = copy_to_local(tokenizer_path) if tokenizer_path else local_path
    config_local = copy_to_local(hf_config_path) if hf_config_path else local_path
    tokenizer = hf_tokenizer(tokenizer_local, trust_remote_code=trust_remote_code)
    if chat_template is not None:
        tokenizer.chat_template = chat_template
    hf_config = load_hf_config(config_local, tokenizer, override_config or {}, trust_remote_code, **config_kwargs)
    processor = None
    if is_vision_language_config(hf_config):
        processor = hf_processor(tokenizer_local, trust_remote_code=trust_remote_code, use_fast=True)
        if processor is not None and chat_template is not None:
            processor.chat_template = chat_template
    return PretrainedFiles(
        local_path,
        tokenizer,
        hf_config,
        processor,
        tokenizer_path=tokenizer_local if tokenizer_path else None,
        hf_config_path=config_local if hf_config_path else None,
    )
