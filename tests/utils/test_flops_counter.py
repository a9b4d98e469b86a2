"""Tests for verl.utils.flops_counter and verl.utils.torch_dtypes."""

import pytest
import torch
from transformers import LlamaConfig, Qwen2Config

from verl.utils.device import is_accelerator_available
from verl.utils.flops_counter import FlopsCounter, get_device_flops, mfu
from verl.utils.torch_dtypes import PrecisionType

LLAMA2_7B = LlamaConfig(
    hidden_size=4096,
    intermediate_size=11008,
    num_hidden_layers=32,
    num_attention_heads=32,
    num_key_value_heads=32,
    vocab_size=32000,
)


def test_llama2_7b_reference_values_without_the_embedding_lookup():
    """verl's reference values for Llama-2-7B, less what verl counts for the input embedding as if it were a matmul
    (6 FLOPs per token per embedding weight): here only the lm-head's weights count."""
    counter = FlopsCounter(LLAMA2_7B)
    embedding_flops_per_token = 6 * 32000 * 4096
    achieved, _ = counter.estimate_flops([512, 1024, 2048], delta_time=1.0)
    assert achieved == pytest.approx((153555818250240 - embedding_flops_per_token * 3584) / 1e12)
    achieved, _ = counter.estimate_flops([4096] * 3, delta_time=1.0)
    assert achieved == pytest.approx((575955114393600 - embedding_flops_per_token * 12288) / 1e12)
    # Twice the time -> half the rate.
    assert counter.estimate_flops([4096] * 3, delta_time=2.0)[0] == pytest.approx(achieved / 2)


def test_gqa_head_dim_by_hand():
    # h=8, 2 heads of dim 4, 1 kv head, I=16, L=1, vocab=10; one sequence of 3 tokens.
    cfg = Qwen2Config(
        hidden_size=8,
        intermediate_size=16,
        num_hidden_layers=1,
        num_attention_heads=2,
        num_key_value_heads=1,
        vocab_size=10,
    )
    # N = 1*(3*8*16 + 8*(8 + 4 + 4 + 8)) + 10*8 (the lm-head; the embedding is a lookup) = 384 + 192 + 80 = 656
    # flops = 6*656*3 + 12*9*4*2*1 = 11808 + 864 = 12672
    achieved, _ = FlopsCounter(cfg).estimate_flops([3], delta_time=1.0)
    assert achieved == pytest.approx(12672 / 1e12)


def test_unknown_model_and_cpu_peak_give_zero_mfu():
    cfg = LlamaConfig(hidden_size=8, intermediate_size=16, num_hidden_layers=1, num_attention_heads=2)
    cfg.model_type = "mystery"
    assert FlopsCounter(cfg).estimate_flops([10], 1.0)[0] == 0.0
    if not is_accelerator_available():
        assert get_device_flops() == float("inf")
    assert mfu(100.0, float("inf"), world_size=2) == 0.0
    assert mfu(100.0, 200.0, world_size=2) == 0.25
    with pytest.raises(ValueError, match="unit='X'"):
        get_device_flops("X")


def test_precision_type():
    assert PrecisionType.to_dtype("bf16") is torch.bfloat16
    assert PrecisionType.to_dtype(16) is torch.float16 and PrecisionType.to_dtype("fp32") is torch.float32
    assert PrecisionType.to_dtype(torch.float16) is torch.float16
    assert PrecisionType.to_str(torch.bfloat16) == "bf16"
    assert PrecisionType.is_fp16("float16") and PrecisionType.is_bf16("bfloat16") and PrecisionType.is_fp32(32)
    with pytest.raises(RuntimeError, match="'int8'"):
        PrecisionType.to_dtype("int8")
