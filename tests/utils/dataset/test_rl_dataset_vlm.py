"""RLHFDataset with a Qwen2.5-VL processor (built from image processor + tokenizer where torchvision is missing):
image pads expanded, 3-D position ids, multi_modal_inputs; bad rows (an image that does not decode, placeholders
that do not match the images) refused with file and row, or dropped with a count, per data.bad_multimodal_rows."""

from __future__ import annotations

import io

import numpy as np
import pandas as pd
import pytest
import torch
from omegaconf import OmegaConf
from PIL import Image

from verl.utils.dataset.rl_dataset import RLHFDataset, collate_fn
from verl.utils.tokenizer import hf_processor, hf_tokenizer


@pytest.fixture(scope="module")
def tokenizer_and_processor(tiny_vlm_dir):
    return hf_tokenizer(tiny_vlm_dir), hf_processor(tiny_vlm_dir)


def _png(width: int, height: int) -> bytes:
    pixels = np.random.default_rng(width * height).integers(0, 255, size=(height, width, 3), dtype=np.uint8)
    buffer = io.BytesIO()
    Image.fromarray(pixels).save(buffer, format="PNG")
    return buffer.getvalue()


def _write(path, rows) -> str:
    records = []
    for i, (content, images) in enumerate(rows):
        records.append(
            {
                "data_source": "hiyouga/geometry3k",
                "prompt": [{"role": "user", "content": content}],
                "images": [{"bytes": b, "path": f"img{i}_{k}.png"} for k, b in enumerate(images)],
                "reward_model": {"style": "rule", "ground_truth": "1"},
                "extra_info": {"index": i},
            }
        )
    pd.DataFrame(records).to_parquet(path)
    return str(path)


def _dataset(files, tokenizer_and_processor, **config):
    tokenizer, processor = tokenizer_and_processor
    cfg = OmegaConf.create({"max_prompt_length": 96, "filter_overlong_prompts": False, **config})
    return RLHFDataset(files, tokenizer, cfg, processor=processor)


def test_image_rows_get_expanded_pads_mrope_positions_and_pixel_inputs(tmp_path, tokenizer_and_processor):
    tokenizer, processor = tokenizer_and_processor
    path = _write(
        tmp_path / "d.parquet",
        [("<image>What is x?", [_png(32, 32)]), ("a<image>b<image>", [_png(16, 32), _png(32, 16)])],
    )
    dataset = _dataset(path, tokenizer_and_processor)
    first, second = dataset[0], dataset[1]
    pad = processor.image_token_id
    # a 32x32 image is 4x4 patches of 8 pixels, merged 2x2: 4 pad tokens; 16x32 gives 2
    assert int((first["input_ids"] == pad).sum()) == 4 and int((second["input_ids"] == pad).sum()) == 4
    assert first["position_ids"].shape == (3, 96)
    assert set(first["multi_modal_inputs"]) == {"pixel_values", "image_grid_thw"}
    assert first["multi_modal_inputs"]["image_grid_thw"].tolist() == [[1, 4, 4]]
    assert len(first["multi_modal_data"]["image"]) == 1 and len(second["multi_modal_data"]["image"]) == 2
    # the unexpanded prompt (one pad per image) is what vLLM takes
    assert first["raw_prompt_ids"].count(pad) == 1
    batch = collate_fn([first, second])
    assert batch["position_ids"].shape == (2, 3, 96) and batch["multi_modal_inputs"].shape == (2,)
    valid = first["attention_mask"].bool()
    image_cols = (first["input_ids"] == pad) & valid
    assert not torch.equal(first["position_ids"][1, image_cols], first["position_ids"][2, image_cols])


def _bad_files(tmp_path):
    good = _write(tmp_path / "good.parquet", [("<image>ok", [_png(32, 32)])] * 3)
    bad = _write(
        tmp_path / "bad.parquet",
        [("<image>ok", [_png(32, 32)]), ("<image>broken", [b"not an image"]), ("<image><image>one", [_png(32, 32)])],
    )
    return [good, bad]


def test_bad_rows_are_refused_with_file_and_row(tmp_path, tokenizer_and_processor):
    files = _bad_files(tmp_path)
    with pytest.raises(ValueError) as info:
        _dataset(files, tokenizer_and_processor)
    message = str(info.value)
    assert "2 multimodal row(s)" in message and f"{files[1]} row 1 (dataset row 4)" in message
    assert "image 0 in column 'images' cannot be decoded" in message and "data.bad_multimodal_rows=skip" in message


def test_bad_rows_are_skipped_with_a_warning_and_count(tmp_path, tokenizer_and_processor, caplog):
    files = _bad_files(tmp_path)
    with caplog.at_level("WARNING"):
        dataset = _dataset(files, tokenizer_and_processor, bad_multimodal_rows="skip")
    assert len(dataset) == 4 and dataset.num_bad_multimodal_rows == 2
    assert f"{files[1]} row 2 (dataset row 5): 2 <image> placeholder(s)" in caplog.text
    pad = tokenizer_and_processor[1].image_token_id
    assert all(int((dataset[i]["input_ids"] == pad).sum()) == 4 for i in range(len(dataset)))
    with pytest.raises(ValueError, match="data.bad_multimodal_rows='drop'"):
        _dataset(files, tokenizer_and_processor, bad_multimodal_rows="drop")


def test_mm_processor_kwargs_reach_the_processor(tmp_path, tokenizer_and_processor):
    """data.mm_processor_kwargs: a pixel budget given to the processor sets the image's grid (and its pads)."""
    path = _write(tmp_path / "d.parquet", [("<image>What is x?", [_png(256, 256)])])
    default = _dataset(path, tokenizer_and_processor, max_prompt_length=160)[0]
    budget = {"max_pixels": 112 * 112}
    larger = _dataset(path, tokenizer_and_processor, max_prompt_length=160, mm_processor_kwargs=budget)
    grid = default["multi_modal_inputs"]["image_grid_thw"]
    larger_grid = larger[0]["multi_modal_inputs"]["image_grid_thw"]
    assert grid.tolist() == [[1, 4, 4]] and larger_grid.tolist() == [[1, 14, 14]]
    # one pad per 2x2 merged patch: 4 -> 49 pads
    assert larger[0]["attention_mask"].sum() - default["attention_mask"].sum() == 49 - 4
