"""Load-time checks of multimodal prompt rows: every image decodes, and the ``<image>`` / ``<video>`` placeholders of
the prompt match the row's images / videos one for one (the processor would otherwise fail, or silently pair text
with the wrong picture, in the middle of training)."""

from __future__ import annotations

__all__ = ["BAD_MULTIMODAL_ROW_ACTIONS", "find_bad_multimodal_rows", "multimodal_row_problem"]

# data.bad_multimodal_rows: stop at the first bad row (naming file and row), or drop bad rows with a warning
BAD_MULTIMODAL_ROW_ACTIONS = ("error", "skip")


def _placeholder_count(messages, placeholder: str) -> int:
    if isinstance(messages, str):
        return messages.count(placeholder)
    count = 0
    for message in messages or []:
        content = message.get("content") if isinstance(message, dict) else None
        if isinstance(content, str):
            count += content.count(placeholder)
    return count


def multimodal_row_problem(row: dict, prompt_key: str, image_key: str, video_key: str) -> str | None:
    """Why ``row`` cannot be fed to a vision-language processor, or None when it can."""
    from verl.utils.dataset.vision_utils import process_image

    messages = row.get(prompt_key)
    images = row.get(image_key) or []
    videos = row.get(video_key) or []
    for placeholder, items, column in (("<image>", images, image_key), ("<video>", videos, video_key)):
        found = _placeholder_count(messages, placeholder)
        if found != len(items):
            return (
                f"{found} {placeholder} placeholder(s) in column {prompt_key!r} for {len(items)} item(s) in {column!r}"
            )
    for k, image in enumerate(images):
        try:
            process_image(image)
        except Exception as exc:  # noqa: BLE001 - any decoder failure makes the row unusable; report it
            return f"image {k} in column {image_key!r} cannot be decoded ({type(exc).__name__}: {exc})"
    return None


def find_bad_multimodal_rows(rows, prompt_key: str, image_key: str, video_key: str) -> list[tuple[int, str]]:
    """``(row index, reason)`` for every unusable row of ``rows`` (a datasets.Dataset or a list of dicts)."""
    bad = []
    for index, row in enumerate(rows):
        problem = multimodal_row_problem(row, prompt_key, image_key, video_key)
        if problem is not None:
            bad.append((index, problem))
    return bad
