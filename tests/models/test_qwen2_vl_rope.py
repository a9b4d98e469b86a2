"""The 3-D rope index of verl.models.transformers.qwen2_vl against transformers' own Qwen2.5-VL ``get_rope_index``,
on a left-padded batch that mixes text-only rows, one and two images of different sizes, and videos."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from PIL import Image

from verl.models.transformers.qwen2_vl import get_rope_index, packed_position_ids
from verl.utils.tokenizer import hf_processor
from verl.utils.vlm_processor import mm_token_type_ids


@pytest.fixture(scope="module")
def model_and_processor(tiny_vlm_dir):
    from transformers import AutoModelForImageTextToText

    model = AutoModelForImageTextToText.from_pretrained(tiny_vlm_dir)
    return model, hf_processor(tiny_vlm_dir)


def _image(width: int, height: int, seed: int) -> Image.Image:
    pixels = np.random.default_rng(seed).integers(0, 255, size=(height, width, 3), dtype=np.uint8)
    return Image.fromarray(pixels)


def _prompt(processor, parts: list) -> str:
    messages = [{"role": "user", "content": parts}]
    return processor.apply_chat_template(messages, add_generation_prompt=True, tokenize=False)


def _left_pad(rows: list[torch.Tensor], pad_id: int):
    width = max(len(r) for r in rows)
    ids = torch.full((len(rows), width), pad_id, dtype=torch.long)
    mask = torch.zeros((len(rows), width), dtype=torch.long)
    for i, r in enumerate(rows):
        ids[i, width - len(r) :] = r
        mask[i, width - len(r) :] = 1
    return ids, mask


def _theirs(model, ids, mask, image_grid_thw=None, video_grid_thw=None, second_per_grid_ts=None):
    config = model.config
    types = mm_token_type_ids(ids, config.image_token_id, config.video_token_id)
    position_ids, _ = model.model.get_rope_index(
        ids,
        mm_token_type_ids=types,
        image_grid_thw=image_grid_thw,
        video_grid_thw=video_grid_thw,
        second_per_grid_ts=second_per_grid_ts,
        attention_mask=mask,
    )
    return position_ids  # (3, bs, seq)


def test_rope_index_matches_transformers_on_mixed_image_batch(model_and_processor):
    model, processor = model_and_processor
    text = {"type": "text", "text": "How long is side x?"}
    rows = [
        ([text], []),
        ([{"type": "image"}, text], [_image(36, 36, 0)]),
        (
            [text, {"type": "image"}, {"type": "text", "text": "and"}, {"type": "image"}],
            [_image(48, 24, 1), _image(20, 40, 2)],
        ),
        ([{"type": "image"}, text], [_image(64, 32, 3)]),
    ]
    encoded, grids = [], []
    for parts, images in rows:
        out = processor(text=[_prompt(processor, parts)], images=images or None, return_tensors="pt")
        encoded.append(out["input_ids"][0])
        if images:
            grids.append(out["image_grid_thw"])
    ids, mask = _left_pad(encoded, processor.tokenizer.pad_token_id)
    image_grid_thw = torch.cat(grids)
    expected = _theirs(model, ids, mask, image_grid_thw=image_grid_thw)

    grid_iter = iter(grids)
    for i, (_, images) in enumerate(rows):
        row_grids = next(grid_iter) if images else None
        ours = get_rope_index(processor, ids[i], image_grid_thw=row_grids, attention_mask=mask[i])
        valid = mask[i].bool()
        assert torch.equal(ours[:, valid], expected[:, i, valid]), f"row {i}"
        assert (ours[:, ~valid] == 0).all()
    # the image rows really are 3-D: height and width indices differ somewhere
    assert any((expected[1, i] != expected[2, i]).any() for i in range(1, len(rows)))


def test_rope_index_matches_transformers_for_videos(model_and_processor):
    model, processor = model_and_processor
    tok = processor.tokenizer
    start, end = tok.convert_tokens_to_ids("<|vision_start|>"), tok.convert_tokens_to_ids("<|vision_end|>")
    video, image = processor.video_token_id, processor.image_token_id
    video_grid = torch.tensor([[3, 4, 6]])  # 3 frame groups of 2x3 merged tokens
    image_grid = torch.tensor([[1, 2, 4]])
    text = torch.tensor(tok.encode("see", add_special_tokens=False))
    row = torch.cat(
        [text, torch.tensor([start] + [video] * 18 + [end]), text, torch.tensor([start] + [image] * 2 + [end]), text]
    )
    ids, mask = _left_pad([row, text], tok.pad_token_id)
    seconds = torch.tensor([1.5])
    expected = _theirs(model, ids[:1], mask[:1], image_grid, video_grid, seconds)
    ours = get_rope_index(processor, ids[0], image_grid, video_grid, seconds, mask[0])
    assert torch.equal(ours, expected[:, 0])
    # temporal index of the second frame group: start + 1 * tokens_per_second (2) * 1.5 s
    first_video = int((ids[0] == video).nonzero()[0])
    assert int(ours[0, first_video + 6] - ours[0, first_video]) == 3


def test_rope_index_refuses_pads_without_grid(model_and_processor):
    _, processor = model_and_processor
    row = torch.tensor([1, 2, processor.image_token_id, 3])
    with pytest.raises(ValueError, match="image placeholder groups"):
        get_rope_index(processor, row)
    with pytest.raises(ValueError, match="image grids but 0"):
        get_rope_index(processor, torch.tensor([1, 2, 3]), image_grid_thw=torch.tensor([[1, 2, 2]]))


def test_packed_position_ids_restart_text_row_per_sequence():
    valid = torch.tensor([[0, 1, 1, 1], [1, 1, 0, 0]], dtype=torch.bool)
    mrope = torch.arange(15).view(3, 1, 5)
    packed = packed_position_ids(mrope, valid)
    assert packed.shape == (4, 1, 5)
    assert packed[0, 0].tolist() == [0, 1, 2, 0, 1]
    assert torch.equal(packed[1:], mrope)
