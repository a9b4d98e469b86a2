"""A Qwen2-VL / Qwen2.5-VL processor built from the model's image processor and tokenizer.

transformers' ``Qwen2_5_VLProcessor`` (and ``AutoProcessor`` for the Qwen-VL families) cannot be constructed without
torchvision, even for images only: it insists on a video processor, which needs torchvision. Where torchvision is
missing (the CPU torch has no matching build on the package index), :func:`load_qwen_vl_processor` builds this class
from the PIL image processor and the tokenizer instead. It offers what the dataset, the rollouts and the checkpoint
code use: ``apply_chat_template``, ``__call__(text=, images=)`` with the same outputs as the real processor (image
pads expanded to one per merged patch, ``pixel_values``, ``image_grid_thw``, ``mm_token_type_ids``),
``save_pretrained``, ``decode``/``batch_decode`` and the ``tokenizer`` / ``image_processor`` attributes.

The vision pad tokens and the per-token modality ids (``mm_token_type_ids``) are defined here, with the processor
that writes them; the Qwen-VL model code (``verl.models.transformers.qwen2_vl``) reads them from this module.
"""

from __future__ import annotations

import json
import logging
import os

import torch

logger = logging.getLogger(__name__)

__all__ = [
    "IMAGE_TOKEN",
    "QWEN2_5_TOKENS_PER_SECOND",
    "VIDEO_TOKEN",
    "QwenVLProcessor",
    "is_vision_language_config",
    "load_qwen_vl_processor",
    "mm_token_type_ids",
]

_QWEN_VL_TYPES = ("qwen2_vl", "qwen2_5_vl")

# The pad tokens a Qwen-VL prompt carries for each image / video (expanded to one per merged patch).
IMAGE_TOKEN = "<|image_pad|>"
VIDEO_TOKEN = "<|video_pad|>"
# Qwen2.5-VL's vision_config.tokens_per_second in every released checkpoint; transformers' processor does not carry it
QWEN2_5_TOKENS_PER_SECOND = 2


def mm_token_type_ids(input_ids: torch.Tensor, image_token_id: int, video_token_id: int | None) -> torch.Tensor:
    """Per-token modality, as transformers' Qwen-VL ``get_rope_index`` reads it: text 0, image 1, video 2."""
    types = torch.zeros_like(input_ids, dtype=torch.int32)
    types[input_ids == image_token_id] = 1
    if video_token_id is not None:
        types[input_ids == video_token_id] = 2
    return types


def is_vision_language_config(hf_config) -> bool:
    """True for a config with a vision tower (image-text-to-text models such as Qwen2-VL, Qwen2.5-VL)."""
    return getattr(hf_config, "vision_config", None) is not None


class QwenVLProcessor:
    """Processor of a Qwen-VL model from its ``image_processor`` and ``tokenizer`` (images only; see module doc)."""

    def __init__(self, image_processor, tokenizer, model_type: str = "qwen2_5_vl", chat_template: str | None = None):
        self.image_processor = image_processor
        self.tokenizer = tokenizer
        self.model_type = model_type
        self.chat_template = chat_template or tokenizer.chat_template
        self.image_token, self.video_token = IMAGE_TOKEN, VIDEO_TOKEN
        self.image_token_id = tokenizer.convert_tokens_to_ids(IMAGE_TOKEN)
        self.video_token_id = tokenizer.convert_tokens_to_ids(VIDEO_TOKEN)
        # the temporal scale of video positions (see verl.models.transformers.qwen2_vl.rope_tokens_per_second)
        self.tokens_per_second = QWEN2_5_TOKENS_PER_SECOND if model_type == "qwen2_5_vl" else None

    def apply_chat_template(self, messages, **kwargs):
        """The tokenizer's chat template rendering (its template must render image parts as Qwen-VL does)."""
        kwargs.setdefault("chat_template", self.chat_template)
        return self.tokenizer.apply_chat_template(messages, **kwargs)

    def __call__(self, text=None, images=None, videos=None, return_tensors: str = "pt", **kwargs):
        """Tokenize ``text`` (a string or a list) with each image placeholder expanded to its image's token count.

        Returns a ``BatchFeature`` with ``input_ids``, ``attention_mask``, ``mm_token_type_ids`` and, with images,
        ``pixel_values`` ``(n_patches, C*T*P*P)`` and ``image_grid_thw`` ``(n_images, 3)``. Raises ValueError when the
        number of image placeholders differs from the number of images.
        """
        from transformers import BatchFeature

        if videos:
            raise NotImplementedError(
                "video inputs need transformers' Qwen-VL video processor, which needs torchvision (not installed); "
                "install torchvision or drop the videos column"
            )
        texts = [text] if isinstance(text, str) else list(text or [])
        # options of the image processor (max_pixels, size, ...) go to it, the rest to the tokenizer, as
        # transformers' processors route them
        image_options = set(getattr(getattr(self.image_processor, "valid_kwargs", None), "__annotations__", {}))
        image_kwargs = {key: kwargs.pop(key) for key in list(kwargs) if key in image_options}
        image_inputs = {}
        if images:
            image_inputs = dict(self.image_processor(images=images, return_tensors="pt", **image_kwargs))
            texts = self._expand_image_pads(texts, image_inputs["image_grid_thw"])
        elif any(IMAGE_TOKEN in t for t in texts):
            raise ValueError(f"the text has {sum(t.count(IMAGE_TOKEN) for t in texts)} image placeholders but no image")
        encoded = self.tokenizer(texts, return_tensors=return_tensors, add_special_tokens=False, **kwargs)
        encoded["mm_token_type_ids"] = mm_token_type_ids(encoded["input_ids"], self.image_token_id, self.video_token_id)
        return BatchFeature({**encoded, **image_inputs}, tensor_type=return_tensors)

    def _expand_image_pads(self, texts: list[str], grid_thw: torch.Tensor) -> list[str]:
        """Replace the k-th image placeholder by ``grid_thw[k].prod() / merge²`` pad tokens."""
        found = sum(t.count(IMAGE_TOKEN) for t in texts)
        if found != len(grid_thw):
            raise ValueError(f"the text has {found} image placeholders for {len(grid_thw)} images")
        merge_area = self.image_processor.merge_size**2
        counts = iter(int(g.prod()) // merge_area for g in grid_thw)
        marker = "\x00image\x00"  # a stand-in that no expanded pad can be mistaken for
        expanded = []
        for t in texts:
            t = t.replace(IMAGE_TOKEN, marker)
            while marker in t:
                t = t.replace(marker, IMAGE_TOKEN * next(counts), 1)
            expanded.append(t)
        return expanded

    def decode(self, *args, **kwargs):
        return self.tokenizer.decode(*args, **kwargs)

    def batch_decode(self, *args, **kwargs):
        return self.tokenizer.batch_decode(*args, **kwargs)

    def save_pretrained(self, save_directory: str, **kwargs) -> None:
        """Write the tokenizer and ``preprocessor_config.json``, as the real processor's files would be."""
        os.makedirs(save_directory, exist_ok=True)
        self.tokenizer.save_pretrained(save_directory)
        self.image_processor.save_pretrained(save_directory)


def load_qwen_vl_processor(name_or_path: str, **kwargs) -> QwenVLProcessor | None:
    """:class:`QwenVLProcessor` for a local Qwen2-VL / Qwen2.5-VL folder (config.json + preprocessor_config.json);
    None for any other folder."""
    config_path = os.path.join(name_or_path, "config.json")
    image_config_path = os.path.join(name_or_path, "preprocessor_config.json")
    if not (os.path.isfile(config_path) and os.path.isfile(image_config_path)):
        return None
    with open(config_path) as f:
        model_type = json.load(f).get("model_type")
    if model_type not in _QWEN_VL_TYPES:
        return None
    from transformers import AutoImageProcessor, AutoTokenizer

    trust = kwargs.get("trust_remote_code", False)
    image_processor = AutoImageProcessor.from_pretrained(name_or_path, trust_remote_code=trust)
    tokenizer = AutoTokenizer.from_pretrained(name_or_path, trust_remote_code=trust)
    logger.info("built a %s processor from its image processor and tokenizer (no torchvision)", model_type)
    return QwenVLProcessor(image_processor, tokenizer, model_type=model_type)
