"""A tiny, randomly initialised Qwen2.5-VL (vision tower + text model) with the shipped tokenizer and a Qwen2-VL image
processor, for tests and the CPU example; nothing is downloaded.

The folder has what a real Qwen2.5-VL checkpoint has: ``config.json`` (``Qwen2_5_VLForConditionalGeneration``),
weights, a tokenizer with the vision special tokens and a chat template that renders image/video parts,
``preprocessor_config.json`` (``Qwen2VLImageProcessor``) and ``generation_config.json``.
"""

from __future__ import annotations

import json
import os

import torch

__all__ = ["VISION_TOKENS", "VLM_CHAT_TEMPLATE", "make_tiny_vlm_dir", "write_tiny_geometry3k"]

VISION_TOKENS = ("<|vision_start|>", "<|vision_end|>", "<|image_pad|>", "<|video_pad|>")

# ChatML as Qwen2.5-VL renders it, minus the default system prompt: a content list's image / video parts become
# <|vision_start|><|image_pad|><|vision_end|>, which the processor expands to one pad per merged patch.
VLM_CHAT_TEMPLATE = (
    "{% for message in messages %}"
    "<|im_start|>{{ message['role'] }}\n"
    "{% if message['content'] is string %}{{ message['content'] }}"
    "{% else %}{% for part in message['content'] %}"
    "{% if part['type'] == 'image' %}<|vision_start|><|image_pad|><|vision_end|>"
    "{% elif part['type'] == 'video' %}<|vision_start|><|video_pad|><|vision_end|>"
    "{% elif part['type'] == 'text' %}{{ part['text'] }}{% endif %}"
    "{% endfor %}{% endif %}"
    "<|im_end|>\n"
    "{% endfor %}"
    "{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}"
)


def _tokenizer():
    """The shipped byte-level tokenizer with Qwen-VL's vision special tokens added (ids 259..262)."""
    from transformers import AutoTokenizer

    from verl.demo.tiny_model import shipped_tokenizer_path

    tokenizer = AutoTokenizer.from_pretrained(shipped_tokenizer_path())
    tokenizer.add_special_tokens({"additional_special_tokens": list(VISION_TOKENS)}, replace_extra_special_tokens=False)
    tokenizer.chat_template = VLM_CHAT_TEMPLATE
    return tokenizer


def _write_portable_tokenizer_config(path: str) -> None:
    """tokenizer_config.json readable by transformers 4.x and 5.x, keeping the VLM chat template and tokens."""
    from verl.utils.tokenizer import SPECIAL_TOKENS

    config_path = os.path.join(path, "tokenizer_config.json")
    with open(config_path) as f:
        config = json.load(f)
    config["tokenizer_class"] = "PreTrainedTokenizerFast"
    config["additional_special_tokens"] = list(SPECIAL_TOKENS[1:]) + list(VISION_TOKENS)
    config["chat_template"] = VLM_CHAT_TEMPLATE
    with open(config_path, "w") as f:
        json.dump(config, f, indent=2, sort_keys=True)
        f.write("\n")


def make_tiny_vlm_dir(
    path: str,
    hidden_size: int = 128,
    num_layers: int = 2,
    num_heads: int = 2,
    num_kv_heads: int = 1,
    intermediate_size: int = 256,
    vision_depth: int = 2,
    vision_hidden_size: int = 32,
    patch_size: int = 8,
    merge_size: int = 2,
    max_image_pixels: int = 32 * 32,
    seed: int = 0,
    dtype: torch.dtype = torch.float32,
) -> str:
    """Write a seeded random Qwen2.5-VL plus tokenizer and image processor into ``path``; returns ``path``.

    The defaults give head_dim 64 (a size vLLM's CPU attention has) and images of at most ``max_image_pixels``
    (32x32: 16 patches of 8x8, merged 2x2 into 4 image tokens). The same arguments give bit-identical weights.
    """
    from transformers import GenerationConfig, Qwen2_5_VLConfig, Qwen2_5_VLForConditionalGeneration
    from transformers.models.qwen2_vl.image_processing_pil_qwen2_vl import Qwen2VLImageProcessorPil

    tokenizer = _tokenizer()
    ids = {t: tokenizer.convert_tokens_to_ids(t) for t in VISION_TOKENS}
    head_dim = hidden_size // num_heads
    # mrope splits the rotary half-dimension between the temporal, height and width axes (Qwen uses 1/4, 3/8, 3/8)
    half = head_dim // 2
    section = [half // 4, (half - half // 4) // 2, half - half // 4 - (half - half // 4) // 2]
    config = Qwen2_5_VLConfig(
        text_config={
            "vocab_size": len(tokenizer),
            "hidden_size": hidden_size,
            "num_hidden_layers": num_layers,
            "num_attention_heads": num_heads,
            "num_key_value_heads": num_kv_heads,
            "intermediate_size": intermediate_size,
            "max_position_embeddings": 2048,
            "rope_parameters": {"rope_type": "default", "rope_theta": 1e6, "mrope_section": section},
            "bos_token_id": tokenizer.bos_token_id,
            "eos_token_id": tokenizer.convert_tokens_to_ids("<|im_end|>"),
            "pad_token_id": tokenizer.pad_token_id,
            "tie_word_embeddings": False,
        },
        vision_config={
            "depth": vision_depth,
            "hidden_size": vision_hidden_size,
            "intermediate_size": 2 * vision_hidden_size,
            "num_heads": 2,
            "patch_size": patch_size,
            "spatial_merge_size": merge_size,
            "temporal_patch_size": 2,
            "window_size": patch_size * merge_size * 2,
            "out_hidden_size": hidden_size,
            "fullatt_block_indexes": [vision_depth - 1],
            "tokens_per_second": 2,
        },
        image_token_id=ids["<|image_pad|>"],
        video_token_id=ids["<|video_pad|>"],
        vision_start_token_id=ids["<|vision_start|>"],
        vision_end_token_id=ids["<|vision_end|>"],
        tie_word_embeddings=False,
    )
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        model = Qwen2_5_VLForConditionalGeneration(config)
    model = model.to(dtype)
    os.makedirs(path, exist_ok=True)
    model.save_pretrained(path)
    tokenizer.save_pretrained(path)
    _write_portable_tokenizer_config(path)
    image_processor = Qwen2VLImageProcessorPil(
        patch_size=patch_size,
        merge_size=merge_size,
        temporal_patch_size=2,
        min_pixels=(patch_size * merge_size) ** 2,
        max_pixels=max_image_pixels,
    )
    image_processor.save_pretrained(path)
    eos = [tokenizer.convert_tokens_to_ids("<|im_end|>"), tokenizer.convert_tokens_to_ids("<|endoftext|>")]
    GenerationConfig(
        bos_token_id=tokenizer.bos_token_id, eos_token_id=eos, pad_token_id=tokenizer.pad_token_id
    ).save_pretrained(path)
    return path


def _shape_image(rng, size: int):
    """A PNG of a random filled triangle or rectangle on white, ``size`` x ``size`` pixels (bytes)."""
    from io import BytesIO

    from PIL import Image, ImageDraw

    image = Image.new("RGB", (size, size), "white")
    draw = ImageDraw.Draw(image)
    color = tuple(int(c) for c in rng.integers(0, 200, size=3))
    if rng.random() < 0.5:
        points = [tuple(int(v) for v in rng.integers(0, size, size=2)) for _ in range(3)]
        draw.polygon(points, fill=color)
    else:
        x0, y0 = (int(v) for v in rng.integers(0, size // 2, size=2))
        draw.rectangle([x0, y0, x0 + size // 3, y0 + size // 4], fill=color)
    buffer = BytesIO()
    image.save(buffer, format="PNG")
    return buffer.getvalue()


def write_tiny_geometry3k(root: str, num_train: int = 16, num_test: int = 4, seed: int = 0) -> str:
    """A small stand-in for a local copy of the geometry3k dataset: ``{root}/data/{split}-00000-of-00001.parquet``
    for train / validation / test, with its columns (``images``: a list of ``{"bytes", "path"}``, ``problem`` starting
    with ``<image>``, ``answer``). Images are drawn shapes of 24 to 48 pixels; returns ``root``."""
    import numpy as np
    import pandas as pd

    rng = np.random.default_rng(seed)
    os.makedirs(os.path.join(root, "data"), exist_ok=True)
    for split, count in (("train", num_train), ("validation", num_test), ("test", num_test)):
        rows = []
        for i in range(count):
            a, b = (int(v) for v in rng.integers(1, 10, size=2))
            size = int(rng.integers(24, 49))
            rows.append(
                {
                    "images": [{"bytes": _shape_image(rng, size), "path": f"{split}_{i}.png"}],
                    "problem": f"<image>Find x if x = {a} + {b}.",
                    "answer": str(a + b),
                }
            )
        pd.DataFrame(rows).to_parquet(os.path.join(root, "data", f"{split}-00000-of-00001.parquet"))
    return root
