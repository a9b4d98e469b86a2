"""vllm-cpu's limits and the CPU engine's memory and dtype choices (no engine is started)."""

import logging

import pytest
from transformers import AutoConfig

from verl.workers.rollout import vllm_cpu
from verl.workers.rollout.vllm_cpu import VLLM_CPU_HEAD_SIZES, cpu_kv_cache_bytes, cpu_rollout_dtype, model_head_dim

CFG = AutoConfig.for_model("qwen2", num_hidden_layers=2, hidden_size=128, num_attention_heads=4, num_key_value_heads=2)
PER_TOKEN = 2 * 2 * 2 * 32 * 2  # k and v, layers, kv heads, head_dim, bf16 bytes
MIB = 1 << 20


def test_head_sizes_match_the_installed_vllm():
    pytest.importorskip("vllm")
    from vllm.v1.attention.backends.cpu_attn import CPUAttentionBackend

    assert tuple(CPUAttentionBackend.get_supported_head_sizes()) == VLLM_CPU_HEAD_SIZES


def test_kv_cache_is_sized_by_the_sequences_of_one_generate_call():
    got = cpu_kv_cache_bytes(CFG, "bfloat16", max_model_len=100, num_seqs=4, memory_fraction=0.5)
    assert got == -(-PER_TOKEN * (100 + 128) * 4 // MIB) * MIB  # enough for 4 sequences, MiB aligned
    assert cpu_kv_cache_bytes(CFG, "float32", 100, 4, 0.5) == -(-2 * PER_TOKEN * (100 + 128) * 4 // MIB) * MIB
    tiny_budget = cpu_kv_cache_bytes(CFG, "bfloat16", max_model_len=100, num_seqs=10**9, memory_fraction=1e-12)
    assert tiny_budget >= PER_TOKEN * (100 + 2 * 128)  # never below one full sequence


def test_engines_on_one_host_share_the_memory_budget(monkeypatch):
    class Memory:
        available = 1000 * MIB

    monkeypatch.setattr("psutil.virtual_memory", lambda: Memory)
    alone = cpu_kv_cache_bytes(CFG, "bfloat16", 100, 10**6, memory_fraction=0.3)
    shared = cpu_kv_cache_bytes(CFG, "bfloat16", 100, 10**6, memory_fraction=0.3, engines_on_host=2)
    assert alone == 300 * MIB and shared == 150 * MIB


def test_rollout_dtype_follows_the_cpu(monkeypatch, caplog):
    monkeypatch.setattr(vllm_cpu, "cpu_has_native_bf16", lambda: False)
    with caplog.at_level(logging.WARNING, logger="verl.workers.rollout.vllm_cpu"):
        assert cpu_rollout_dtype("bfloat16") == "float32"
    assert "no native bf16" in caplog.text and "rollout.dtype=float32" in caplog.text
    assert cpu_rollout_dtype("float32") == "float32"
    monkeypatch.setattr(vllm_cpu, "cpu_has_native_bf16", lambda: True)
    assert cpu_rollout_dtype("torch.bfloat16") == "bfloat16"


def test_model_head_dim():
    assert model_head_dim(CFG) == 32
    assert model_head_dim(AutoConfig.for_model("qwen3", hidden_size=64, num_attention_heads=4, head_dim=128)) == 128
