"""Tests for verl.utils.model."""

import torch
from transformers import Qwen2Config

from verl.demo.tiny_model import make_tiny_model_dir
from verl.utils.model import (
    compute_position_id_with_mask,
    create_random_mask,
    get_generation_config,
    get_model_size,
    update_model_config,
)


def test_position_ids_left_padded():
    mask = torch.tensor([[0, 0, 1, 1, 1], [1, 1, 1, 1, 0], [0, 0, 0, 0, 0]])
    expected = torch.tensor([[0, 0, 0, 1, 2], [0, 1, 2, 3, 3], [0, 0, 0, 0, 0]])
    assert torch.equal(compute_position_id_with_mask(mask), expected)
    assert torch.equal(compute_position_id_with_mask(mask[0]), expected[0])


def test_create_random_mask_shape_and_contiguity():
    torch.manual_seed(0)
    ids = torch.zeros(8, 20, dtype=torch.long)
    mask = create_random_mask(
        ids, max_ratio_of_valid_token=0.5, max_ratio_of_left_padding=0.3, min_ratio_of_valid_token=0.2
    )
    assert mask.shape == (8, 20)
    for row in mask:
        ones = row.nonzero().flatten()
        assert 4 <= len(ones) <= 10
        assert ones[0] <= 6 and torch.equal(ones, torch.arange(ones[0], ones[0] + len(ones)))


def test_update_model_config_recurses():
    config = Qwen2Config(hidden_size=64, num_attention_heads=4, num_key_value_heads=2)
    update_model_config(config, {"eos_token_id": 9, "rope_scaling": {"type": "linear", "factor": 2.0}, "new_key": 1})
    assert config.eos_token_id == 9 and config.new_key == 1
    assert config.rope_scaling["factor"] == 2.0

    class Sub:
        a = 1
        b = 2

    class Outer:
        sub = Sub()

    outer = Outer()
    update_model_config(outer, {"sub": {"a": 5}})
    assert (outer.sub.a, outer.sub.b) == (5, 2)


def test_generation_config_and_size(tmp_path):
    path = make_tiny_model_dir(str(tmp_path / "m"))
    gen = get_generation_config(path)
    assert gen.eos_token_id == 256 and gen.pad_token_id == 256
    assert get_generation_config(str(tmp_path / "missing")) is None
    lin = torch.nn.Linear(10, 100)  # 1100 params
    assert get_model_size(lin) == (1.1, "K")
    assert get_model_size(lin, scale="") == (1100, "")
