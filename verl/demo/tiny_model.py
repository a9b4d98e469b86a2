"""Tiny, randomly initialised HF models (Qwen2 / Llama, or a named family's shape) with the shipped tokenizer, for
tests and the demo task."""

from __future__ import annotations

import os
import tempfile

import torch

__all__ = ["make_tiny_model_dir", "shipped_tokenizer_path"]

_ASSET_DIR = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "assets", "tokenizer")

_HEAD_TO_AUTO = {
    "causal_lm": "AutoModelForCausalLM",
    "token_classification": "AutoModelForTokenClassification",
    "sequence_classification": "AutoModelForSequenceClassification",
}


def shipped_tokenizer_path() -> str:
    """Directory of the byte-level ChatML tokenizer the project ships (built into a temp cache if missing)."""
    if os.path.isfile(os.path.join(_ASSET_DIR, "tokenizer.json")):
        return _ASSET_DIR
    # An install without package data: rebuild it deterministically, once per machine.
    from verl.utils.tokenizer import build_byte_tokenizer

    cache = os.path.join(tempfile.gettempdir(), "verl_shipped_tokenizer")
    if not os.path.isfile(os.path.join(cache, "tokenizer.json")):
        build_byte_tokenizer(cache)
    return cache


def _make_config(model_type: str, vocab_size: int, special_ids: dict, **dims):
    """Build the HF config for ``model_type`` with the given dimensions and the tokenizer's special ids."""
    from transformers import LlamaConfig, Qwen2Config

    if model_type not in ("qwen2", "llama"):
        raise ValueError(f"model_type={model_type!r} is not supported; expected 'qwen2' or 'llama'")
    config_cls = Qwen2Config if model_type == "qwen2" else LlamaConfig
    return config_cls(
        vocab_size=vocab_size,
        hidden_size=dims["hidden_size"],
        num_hidden_layers=dims["num_layers"],
        num_attention_heads=dims["num_heads"],
        num_key_value_heads=dims["num_kv_heads"],
        intermediate_size=dims["intermediate_size"],
        max_position_embeddings=dims["max_position_embeddings"],
        tie_word_embeddings=dims["tie_word_embeddings"],
        num_labels=1,
        **special_ids,
    )


def make_tiny_model_dir(
    path: str,
    model_type: str = "qwen2",
    head: str = "causal_lm",
    hidden_size: int = 64,
    num_layers: int = 2,
    num_heads: int = 4,
    num_kv_heads: int = 2,
    intermediate_size: int = 128,
    seed: int = 0,
    tie_word_embeddings: bool = False,
    dtype: torch.dtype = torch.float32,
    max_position_embeddings: int = 2048,
    vocab_size: int | None = None,
    family: str | None = None,
) -> str:
    """Write a seeded random HF model plus the shipped tokenizer into ``path``; returns ``path``.

    The same arguments always give bit-identical weights. ``head`` picks the model class:
    ``causal_lm`` (actor/ref/rollout), ``token_classification`` or ``sequence_classification``
    (critic / reward model, ``num_labels=1``). The vocabulary size is the tokenizer's length unless ``vocab_size``
    asks for a larger embedding (a real model's shape: unused rows, as in Qwen's padded vocabularies).
    ``family`` (one of ``verl.demo.model_families.FAMILIES``: qwen2.5, qwen3, llama3.1, gemma2, deepseek-llm,
    qwen3-moe) builds that family's config class and tokenizer quirks instead of ``model_type``.
    """
    import transformers
    from transformers import AutoTokenizer

    from verl.utils.tokenizer import make_tokenizer_config_portable

    if head not in _HEAD_TO_AUTO:
        raise ValueError(f"head={head!r} is not supported; expected one of {sorted(_HEAD_TO_AUTO)}")
    if num_heads % num_kv_heads != 0 or hidden_size % num_heads != 0:
        raise ValueError(
            f"hidden_size={hidden_size}, num_heads={num_heads}, num_kv_heads={num_kv_heads}: "
            "hidden_size must be divisible by num_heads and num_heads by num_kv_heads"
        )
    tokenizer = AutoTokenizer.from_pretrained(shipped_tokenizer_path())
    dims = {
        "hidden_size": hidden_size,
        "num_layers": num_layers,
        "num_heads": num_heads,
        "num_kv_heads": num_kv_heads,
        "intermediate_size": intermediate_size,
        "max_position_embeddings": max_position_embeddings,
        "tie_word_embeddings": tie_word_embeddings,
    }
    eos_ids = tokenizer.eos_token_id
    if family is not None:
        from verl.demo import model_families

        tokenizer = model_families.family_tokenizer(family, tokenizer)
        eos_ids = model_families.family_eos_ids(family, tokenizer)
        config = model_families.family_config(family, tokenizer, max(vocab_size or 0, len(tokenizer)), dims)
    else:
        special_ids = {
            "bos_token_id": tokenizer.bos_token_id,
            "eos_token_id": tokenizer.eos_token_id,
            "pad_token_id": tokenizer.pad_token_id,
        }
        config = _make_config(model_type, max(vocab_size or 0, len(tokenizer)), special_ids, **dims)
    auto_cls = getattr(transformers, _HEAD_TO_AUTO[head])
    # Seed a private generator state: initialisation must not depend on (or disturb) the caller's RNG.
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        model = auto_cls.from_config(config)
    model = model.to(dtype)
    os.makedirs(path, exist_ok=True)
    model.save_pretrained(path)
    tokenizer.save_pretrained(path)
    make_tokenizer_config_portable(os.path.join(path, "tokenizer_config.json"))
    if family is not None:
        model_families.finish_family_dir(family, path)
    if head == "causal_lm":
        from transformers import GenerationConfig

        GenerationConfig(
            bos_token_id=tokenizer.bos_token_id,
            eos_token_id=eos_ids,
            pad_token_id=tokenizer.pad_token_id,
        ).save_pretrained(path)
    return path
