"""Image and video loading for multimodal RL prompts."""

from __future__ import annotations

from io import BytesIO

__all__ = ["merge_multi_modal_inputs", "process_image", "process_video"]


def process_image(image):
    """An RGB ``PIL.Image`` from a PIL image or a dict with ``bytes`` (parquet) or ``image`` (an image or a path)."""
    from PIL import Image

    if isinstance(image, Image.Image):
        return image.convert("RGB")
    if isinstance(image, dict):
        if image.get("bytes") is not None:
            return Image.open(BytesIO(image["bytes"])).convert("RGB")
        if image.get("image") is not None:
            return process_image(image["image"])
        if image.get("path"):
            return Image.open(image["path"]).convert("RGB")
        raise ValueError(f"image dict needs a 'bytes', 'image' or 'path' entry, got keys {sorted(image)}")
    if isinstance(image, str | bytes):
        return Image.open(image if isinstance(image, str) else BytesIO(image)).convert("RGB")
    raise TypeError(f"cannot read an image from {type(image).__name__}; expected PIL.Image, dict, path or bytes")


def process_video(video, nframes=None, fps=None, fps_min_frames=None, fps_max_frames=None):
    """Decode a video dict (``{"video": ...}`` plus optional ``nframes``/``fps``) into frames with qwen-vl-utils."""
    try:
        from qwen_vl_utils.vision_process import fetch_video
    except ImportError as e:
        raise ImportError("video prompts need the qwen-vl-utils package: pip install qwen-vl-utils") from e
    if not isinstance(video, dict) or "video" not in video:
        raise ValueError(f"a video entry must be a dict with a 'video' key, got {type(video).__name__}")
    video = dict(video)
    for key, value in (
        ("nframes", nframes),
        ("fps", fps),
        ("min_frames", fps_min_frames),
        ("max_frames", fps_max_frames),
    ):
        if value is not None:
            video[key] = value
    return fetch_video(video)


def merge_multi_modal_inputs(micro_batch: dict) -> dict:
    """Concatenate the per-row ``multi_modal_inputs`` dicts along dim 0 into model kwargs ({} when absent)."""
    rows = micro_batch.get("multi_modal_inputs")
    if rows is None or len(rows) == 0:
        return {}
    # rows of a vision-language batch may differ in keys (a text-only row has no pixel_values): merge what is there
    import torch

    keys = dict.fromkeys(key for row in rows for key in row)
    return {key: torch.cat([row[key] for row in rows if key in row], dim=0) for key in keys}
