"""Qwen2-VL / Qwen2.5-VL: 3-D rotary position ids ("mrope") for image and video tokens, and the position-id layout
these models need for packed (remove-padding) inputs.

Text tokens advance one position per token on all three axes. The tokens of one image or video form a
``(t, h / merge, w / merge)`` grid: each axis gets its own index (temporal, row, column), offset by the position where
the grid starts; the text after it resumes at ``start + max(h, w) / merge`` (as transformers 5 computes it, so the
positions of a prompt match those ``generate`` derives for the same prompt). For Qwen2.5-VL videos
the temporal index is scaled by ``tokens_per_second * second_per_grid_t`` (real time); Qwen2-VL uses the frame-group
index as is, and still images have no temporal spacing in either.
"""

from __future__ import annotations

import torch

# The vision pad tokens and per-token modality ids are what the processor writes; the model reads them from there.
from verl.utils.vlm_processor import IMAGE_TOKEN, QWEN2_5_TOKENS_PER_SECOND, VIDEO_TOKEN, mm_token_type_ids

__all__ = [
    "get_rope_index",
    "generation_inputs",
    "packed_position_ids",
    "ulysses_text_model",
    "rope_tokens_per_second",
]


def rope_tokens_per_second(processor) -> float | None:
    """Temporal scale of video positions for ``processor``'s model family: 2 for Qwen2.5-VL, None for Qwen2-VL."""
    explicit = getattr(processor, "tokens_per_second", None)
    if explicit is not None:
        return explicit
    return QWEN2_5_TOKENS_PER_SECOND if "Qwen2_5" in type(processor).__name__ else None


def _token_id(processor, token: str) -> int:
    tokenizer = getattr(processor, "tokenizer", processor)
    return tokenizer.convert_tokens_to_ids(token)


def _grid_positions(grid_thw, start: int, merge: int, time_scale: float | None) -> torch.Tensor:
    """``(3, t*h*w/merge²)`` positions of one image/video grid whose first token sits at ``start``."""
    t, h, w = (int(x) for x in grid_thw)
    h, w = h // merge, w // merge
    temporal = torch.arange(t)
    if time_scale is not None:
        temporal = (temporal * time_scale).long()
    rows, cols = torch.arange(h), torch.arange(w)
    grid_t = temporal.view(-1, 1, 1).expand(t, h, w)
    grid_h = rows.view(1, -1, 1).expand(t, h, w)
    grid_w = cols.view(1, 1, -1).expand(t, h, w)
    return torch.stack([grid_t, grid_h, grid_w]).reshape(3, -1) + start


def get_rope_index(
    processor,
    input_ids: torch.Tensor,
    image_grid_thw: torch.Tensor | None = None,
    video_grid_thw: torch.Tensor | None = None,
    second_per_grid_ts: torch.Tensor | list | None = None,
    attention_mask: torch.Tensor | None = None,
) -> torch.Tensor:
    """The ``(3, seq_len)`` rope position ids of one (possibly left-padded) prompt.

    input_ids, attention_mask ``(seq_len,)``; image_grid_thw ``(n_images, 3)``, video_grid_thw ``(n_videos, 3)`` in
    the order the images/videos appear; second_per_grid_ts ``(n_videos,)`` seconds per temporal grid step (1.0 when
    absent). ``processor`` gives the merge size, the image/video pad token ids and the model family. Padding
    positions get 0, as in transformers. Raises ValueError when the pad tokens do not match the grids.
    """
    merge = processor.image_processor.merge_size
    tokens_per_second = rope_tokens_per_second(processor)
    image_id, video_id = _token_id(processor, IMAGE_TOKEN), _token_id(processor, VIDEO_TOKEN)
    if attention_mask is None:
        attention_mask = torch.ones_like(input_ids)
    valid = attention_mask.bool()
    ids = input_ids[valid].tolist()
    grids = {image_id: list(image_grid_thw if image_grid_thw is not None else [])}
    grids[video_id] = list(video_grid_thw if video_grid_thw is not None else [])
    seconds = list(second_per_grid_ts) if second_per_grid_ts is not None else [1.0] * len(grids[video_id])
    used = {image_id: 0, video_id: 0}

    pieces, pos, i = [], 0, 0
    while i < len(ids):
        token = ids[i]
        if token not in used:
            j = i
            while j < len(ids) and ids[j] not in used:
                j += 1
            pieces.append(torch.arange(pos, pos + j - i).view(1, -1).expand(3, -1))
            pos += j - i
            i = j
            continue
        k = used[token]
        if k >= len(grids[token]):
            kind = "image" if token == image_id else "video"
            raise ValueError(f"the prompt has more {kind} placeholder groups than {kind} grids ({len(grids[token])})")
        grid = grids[token][k]
        used[token] += 1
        scale = None
        if token == video_id and tokens_per_second is not None:
            scale = tokens_per_second * float(seconds[k])
        block = _grid_positions(grid, pos, merge, scale)
        if ids[i : i + block.shape[1]] != [token] * block.shape[1]:
            raise ValueError(f"a grid {list(map(int, grid))} needs {block.shape[1]} consecutive pad tokens at {i}")
        pieces.append(block)
        pos += max(int(grid[1]), int(grid[2])) // merge
        i += block.shape[1]
    for token, count in used.items():
        if count != len(grids[token]):
            kind = "image" if token == image_id else "video"
            raise ValueError(f"{len(grids[token])} {kind} grids but {count} {kind} placeholder groups in the prompt")

    position_ids = torch.zeros(3, input_ids.shape[0], dtype=torch.long)
    if pieces:
        position_ids[:, valid] = torch.cat(pieces, dim=1)
    return position_ids


def packed_position_ids(mrope_rmpad: torch.Tensor, valid: torch.Tensor) -> torch.Tensor:
    """Position ids for a packed forward of a Qwen-VL model: ``(4, 1, nnz)``.

    mrope_rmpad ``(3, 1, nnz)``: the rope ids of the valid tokens, row after row; valid ``(bs, seqlen)``. Row 0 is
    added: plain text positions restarting at 0 for every packed sequence. transformers' Qwen-VL text model reads
    such a first row as the packing layout and builds a block-diagonal causal mask from it; without it a packed row
    would attend across sequences (the 3-D ids do not restart at 0 where a sequence starts after an image).
    """
    text = (torch.cumsum(valid.long(), dim=-1) - 1)[valid].view(1, 1, -1)
    return torch.cat([text.to(mrope_rmpad), mrope_rmpad], dim=0)


def generation_inputs(model_config, input_ids: torch.Tensor, multi_modal_inputs) -> dict:
    """Extra ``generate`` kwargs for a batch of Qwen-VL prompts: the rows' processor outputs merged
    (``pixel_values``, ``image_grid_thw``, ...) and ``mm_token_type_ids``, from which ``generate`` derives the same 3-D
    positions as :func:`get_rope_index`. input_ids ``(bs, prompt_len)``; multi_modal_inputs: one dict per row."""
    from verl.utils.dataset.vision_utils import merge_multi_modal_inputs

    kwargs = merge_multi_modal_inputs({"multi_modal_inputs": multi_modal_inputs})
    kwargs = {key: value.to(input_ids.device) for key, value in kwargs.items()}
    video_id = getattr(model_config, "video_token_id", None)
    kwargs["mm_token_type_ids"] = mm_token_type_ids(input_ids, model_config.image_token_id, video_id)
    return kwargs


def _text_model(model: torch.nn.Module) -> torch.nn.Module | None:
    """The language model inside a Qwen-VL model (``model.model.language_model`` in transformers 5), or None."""
    for name, module in model.named_modules():
        if name.endswith("language_model") and type(module).__name__.endswith("TextModel"):
            return module
    return None


def ulysses_text_model(model: torch.nn.Module) -> bool:
    """Make a Qwen-VL model's text model keep only this Ulysses SP rank's slice of the sequence.

    Under sequence parallelism each rank gets the whole packed row of input ids (padded to a multiple of sp): the
    image embeddings are scattered into the text embeddings at the image pad tokens, which may sit on any rank's
    slice. The text model then drops the other ranks' tokens (``inputs_embeds`` and every row of ``position_ids``)
    before its layers; the patched attention (``monkey_patch.ulysses_attention``) all-to-alls across the SP group as
    for text models. A pass-through when no SP group of more than one rank is set. Returns False when ``model``
    has no Qwen-VL text model.
    """
    import functools

    from verl.models.transformers.monkey_patch import ULYSSES_SKIP_ATTR
    from verl.utils.ulysses import get_ulysses_sequence_parallel_world_size, slice_input_tensor

    text_model = _text_model(model)
    if text_model is None:
        return False
    if getattr(text_model, "_verl_ulysses_sliced", False):
        return True
    base_forward = text_model.forward

    @functools.wraps(base_forward)
    def forward(*args, inputs_embeds=None, position_ids=None, **kwargs):
        if get_ulysses_sequence_parallel_world_size() > 1 and inputs_embeds is not None:
            inputs_embeds = slice_input_tensor(inputs_embeds, dim=1, padding=False)
            if position_ids is not None:
                position_ids = slice_input_tensor(position_ids, dim=-1, padding=False)
        return base_forward(*args, inputs_embeds=inputs_embeds, position_ids=position_ids, **kwargs)

    text_model.forward = forward
    text_model._verl_ulysses_sliced = True
    # the vision tower runs on every rank over all patches (its attention spans one image): keep it out of SP
    for name, module in model.named_modules():
        if ".visual." in f".{name}.":
            setattr(module, ULYSSES_SKIP_ATTR, True)
    return True
