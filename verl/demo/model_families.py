"""Tiny stand-ins for the model families users train: each family's config class and the quirks of its real
``config.json`` and tokenizer (explicit head_dim, tied heads, padded vocabularies, llama3 rope scaling, soft-capping,
sliding windows, experts, no pad token, a BOS the chat template writes, several EOS ids), scaled down.

Used through ``make_tiny_model_dir(path, family=...)``. The special tokens a family names are added to the shipped
byte-level tokenizer, so ids differ from the real ones; what matters is which of them exist and how they are used.
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass, field

__all__ = ["FAMILIES", "FamilySpec", "family_config", "family_eos_ids", "family_tokenizer", "finish_family_dir"]


@dataclass(frozen=True)
class FamilySpec:
    """One family: its HF config class and fields, and its tokenizer's special tokens.

    ``bos``/``eos``/``pad``: special token strings (``pad=None``: the real tokenizer has none); ``stop``: the
    tokens whose ids the real ``generation_config.json`` lists as EOS (after ``eos``); ``vocab_pad``: spare embedding
    rows past the tokenizer, as in real padded vocabularies; ``bos_in_template``: the chat template writes the BOS.
    """

    config_class: str
    config: dict = field(default_factory=dict)
    bos: str | None = None
    eos: str = "<|im_end|>"
    pad: str | None = "<|endoftext|>"
    stop: tuple[str, ...] = ()
    vocab_pad: int = 0
    bos_in_template: bool = False
    head_dim: int | None = None  # explicit head_dim (may differ from hidden_size / num_heads)
    config_eos_list: bool = False  # config.json's eos_token_id is the list of stop ids, not one id


_QWEN = {"eos": "<|im_end|>", "pad": "<|endoftext|>", "stop": ("<|endoftext|>",), "vocab_pad": 37}

FAMILIES: dict[str, FamilySpec] = {
    # Qwen2.5-0.5B-Instruct: qkv bias, tied embeddings, GQA, rope_theta 1e6, padded vocabulary, eos <|im_end|>
    "qwen2.5": FamilySpec("Qwen2Config", {"tie_word_embeddings": True, "rope_theta": 1e6}, **_QWEN),
    # Qwen3-0.6B: q/k norms, head_dim * num_heads != hidden_size, tied embeddings
    "qwen3": FamilySpec("Qwen3Config", {"tie_word_embeddings": True, "rope_theta": 1e6}, head_dim=64, **_QWEN),
    # Llama-3.1-8B-Instruct: llama3 rope scaling, no pad token, BOS in the chat template, three EOS ids
    "llama3.1": FamilySpec(
        "LlamaConfig",
        {
            "rope_theta": 500000.0,
            "rope_scaling": {
                "rope_type": "llama3",
                "factor": 8.0,
                "low_freq_factor": 1.0,
                "high_freq_factor": 4.0,
                "original_max_position_embeddings": 64,
            },
        },
        bos="<|begin_of_text|>",
        eos="<|eot_id|>",
        pad=None,
        stop=("<|end_of_text|>", "<|eom_id|>"),
        bos_in_template=True,
        config_eos_list=True,
    ),
    # Gemma-2-2b-it: soft-capped attention and logits, alternating sliding-window layers, query_pre_attn_scalar
    # != head_dim, tied embeddings scaled by sqrt(hidden). The caps are scaled to a tiny model's logit range (the
    # real 50 / 30 never bind on random weights, so a path that ignored them would go unnoticed).
    "gemma2": FamilySpec(
        "Gemma2Config",
        {
            "tie_word_embeddings": True,
            "attn_logit_softcapping": 0.5,
            "final_logit_softcapping": 0.3,
            "sliding_window": 8,
            "query_pre_attn_scalar": 48,
            "hidden_activation": "gelu_pytorch_tanh",
        },
        bos="<bos>",
        eos="<eos>",
        pad="<pad>",
        stop=("<end_of_turn>",),
        bos_in_template=True,
        head_dim=64,
    ),
    # deepseek-llm-7b-chat: a Llama architecture with full multi-head attention (kv heads = heads), rms_norm_eps
    # 1e-6, a padded vocabulary, a BOS the template writes and no pad token
    "deepseek-llm": FamilySpec(
        "LlamaConfig",
        {"rms_norm_eps": 1e-6, "rope_theta": 10000.0, "full_mha": True},
        bos="<｜begin▁of▁sentence｜>",
        eos="<｜end▁of▁sentence｜>",
        pad=None,
        vocab_pad=29,
        bos_in_template=True,
    ),
    # Qwen3-30B-A3B's shape: routed experts (top-k of n, normalised), q/k norms, untied head
    "qwen3-moe": FamilySpec(
        "Qwen3MoeConfig",
        {"num_experts": 4, "num_experts_per_tok": 2, "norm_topk_prob": True, "decoder_sparse_step": 1},
        head_dim=64,
        **_QWEN,
    ),
}


def _spec(family: str) -> FamilySpec:
    if family not in FAMILIES:
        raise ValueError(f"family={family!r} is not supported; expected one of {sorted(FAMILIES)}")
    return FAMILIES[family]


def family_tokenizer(family: str, tokenizer):
    """The shipped tokenizer with ``family``'s special tokens added and its bos/eos/pad set (pad unset if the real
    tokenizer has none)."""
    spec = _spec(family)
    names = [t for t in (spec.bos, spec.eos, spec.pad, *spec.stop) if t is not None]
    new = [t for t in names if t not in tokenizer.get_vocab()]
    if new:
        tokenizer.add_special_tokens({"additional_special_tokens": new}, replace_extra_special_tokens=False)
    tokenizer.bos_token = spec.bos
    tokenizer.eos_token = spec.eos
    tokenizer.pad_token = spec.pad
    if spec.bos_in_template:
        # as the real tokenizers do, encoding with special tokens prepends the BOS too: a path that tokenizes a
        # rendered chat without add_special_tokens=False gets two
        from tokenizers.processors import TemplateProcessing

        bos = (spec.bos, tokenizer.convert_tokens_to_ids(spec.bos))
        processor = TemplateProcessing(
            single=f"{spec.bos} $A", pair=f"{spec.bos} $A {spec.bos} $B", special_tokens=[bos]
        )
        tokenizer.backend_tokenizer.post_processor = processor
    return tokenizer


def family_config(family: str, tokenizer, vocab_size: int, dims: dict):
    """The HF config of a tiny ``family`` model: ``dims`` (hidden_size, num_layers, ...) plus the family's quirks,
    with ``tokenizer``'s (see :func:`family_tokenizer`) special ids."""
    import transformers

    spec = _spec(family)
    extra = dict(spec.config)
    special_ids = {
        "bos_token_id": tokenizer.bos_token_id,
        "eos_token_id": family_eos_ids(family, tokenizer) if spec.config_eos_list else tokenizer.eos_token_id,
        "pad_token_id": tokenizer.pad_token_id,
    }
    kv_heads = dims["num_heads"] if extra.pop("full_mha", False) else dims["num_kv_heads"]
    if spec.head_dim is not None:
        extra["head_dim"] = spec.head_dim
    if spec.config_class == "Qwen3MoeConfig":
        extra["moe_intermediate_size"] = dims["intermediate_size"] // 2
    if spec.config_class == "Gemma2Config":
        # alternate sliding and full attention as the real model does (sliding first)
        extra["layer_types"] = [("sliding_attention", "full_attention")[i % 2] for i in range(dims["num_layers"])]
    config_cls = getattr(transformers, spec.config_class)
    return config_cls(
        vocab_size=vocab_size + spec.vocab_pad,
        hidden_size=dims["hidden_size"],
        num_hidden_layers=dims["num_layers"],
        num_attention_heads=dims["num_heads"],
        num_key_value_heads=kv_heads,
        intermediate_size=dims["intermediate_size"],
        max_position_embeddings=dims["max_position_embeddings"],
        **{"tie_word_embeddings": dims["tie_word_embeddings"], **extra},
        **special_ids,
    )


def family_eos_ids(family: str, tokenizer) -> int | list[int]:
    """The EOS id(s) the real ``generation_config.json`` lists: the tokenizer's eos, then the family's stop tokens."""
    spec = _spec(family)
    ids = [tokenizer.convert_tokens_to_ids(t) for t in (spec.eos, *spec.stop)]
    return ids if len(ids) > 1 else ids[0]


def finish_family_dir(family: str, path: str) -> None:
    """Rewrite the saved tokenizer files for ``family``: its special tokens, and a chat template that writes the BOS
    where the real one does (which is why the dataset tokenizes prompts without adding special tokens)."""
    spec = _spec(family)
    config_path = os.path.join(path, "tokenizer_config.json")
    with open(config_path) as f:
        config = json.load(f)
    config["bos_token"], config["eos_token"], config["pad_token"] = spec.bos, spec.eos, spec.pad
    if spec.bos_in_template:
        config["chat_template"] = "{{ bos_token }}" + config["chat_template"]
        jinja = os.path.join(path, "chat_template.jinja")
        if os.path.isfile(jinja):
            with open(jinja, "w") as f:
                f.write(config["chat_template"])
    with open(config_path, "w") as f:
        json.dump(config, f, indent=2, sort_keys=True)
        f.write("\n")
