"""MFU per phase: FLOPs on the real tokens, the passes of each phase, the peak (datasheet or measured, cached)."""

import json

import pytest
import torch
from transformers import Qwen2Config

from verl import DataProto
from verl.trainer.ppo.mfu import PhaseMFU, compute_mfu_metrics
from verl.utils import peak_flops
from verl.utils.flops_counter import FlopsCounter


def _counter():
    config = Qwen2Config(
        hidden_size=64, intermediate_size=128, num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2,
        vocab_size=256,
    )  # fmt: skip
    return FlopsCounter(config)


def test_phase_flops_follow_passes_tokens_and_epochs():
    counter = _counter()
    batch = DataProto(meta_info={"global_token_num": [10, 30]})
    timing = {"gen": 2.0, "old_log_prob": 1.0, "update_actor": 3.0, "reward": 5.0}
    metrics = compute_mfu_metrics(batch, timing, counter, peak_flops=1e9, ppo_epochs=2)
    train = counter.estimate_flops([10, 30], 1.0)[0] * 1e12  # forward + backward FLOPs of the batch
    assert metrics["perf/achieved_tflops/old_log_prob"] == pytest.approx(train / 3 / 1.0 / 1e12)
    assert metrics["perf/achieved_tflops/gen"] == pytest.approx(train / 3 / 2.0 / 1e12)
    assert metrics["perf/achieved_tflops/update_actor"] == pytest.approx(train * 2 / 3.0 / 1e12)  # 2 epochs
    assert metrics["perf/mfu/update_actor"] == pytest.approx(train * 2 / 3.0 / 1e9)
    assert "perf/mfu/reward" not in metrics and metrics["perf/peak_tflops"] == pytest.approx(1e-3)
    # packed, not padded: padding tokens are not counted, only the sequences' own lengths
    padded = compute_mfu_metrics(DataProto(meta_info={"global_token_num": [10, 30, 0]}), timing, counter, 1e9)
    assert padded["perf/achieved_tflops/gen"] == pytest.approx(metrics["perf/achieved_tflops/gen"])


def test_the_cpu_peak_is_measured_once_and_cached(tmp_path, monkeypatch):
    monkeypatch.setenv("VERL_CACHE_DIR", str(tmp_path))
    calls = []
    monkeypatch.setattr(peak_flops, "_measure", lambda dtype, threads: calls.append((dtype, threads)) or 5e10)
    monkeypatch.setattr(peak_flops, "_load_average", lambda: 0.0)  # a quiet host: no second probe
    first = peak_flops.cpu_peak_flops(torch.float32, threads=2)
    again = peak_flops.cpu_peak_flops(torch.float32, threads=2)
    assert first.flops == again.flops == 5e10 and len(calls) == 1
    assert "float32 GEMM (x @ W.T) on 2 thread(s)" in first.source
    peak_flops.cpu_peak_flops(torch.bfloat16, threads=2)  # another dtype is another measurement
    assert len(calls) == 2 and len(json.loads((tmp_path / "peak_flops.json").read_text())) == 2


def test_a_busy_probe_is_repeated_when_quieter_and_the_higher_peak_kept(tmp_path, monkeypatch):
    monkeypatch.setenv("VERL_CACHE_DIR", str(tmp_path))
    probes, load = iter([3e10, 5e10, 4e10]), [6.0]
    monkeypatch.setattr(peak_flops, "_measure", lambda dtype, threads: next(probes))
    monkeypatch.setattr(peak_flops, "_load_average", lambda: load[0])
    assert peak_flops.cpu_peak_flops(torch.float32, threads=2).flops == 3e10  # probed at load 6
    assert peak_flops.cpu_peak_flops(torch.float32, threads=2).flops == 3e10  # as busy now: the cache serves
    load[0] = 1.0
    assert peak_flops.cpu_peak_flops(torch.float32, threads=2).flops == 5e10  # quieter: probed again, higher
    load[0] = 0.2
    assert peak_flops.cpu_peak_flops(torch.float32, threads=2).flops == 5e10  # load 1 was quiet: not probed
    assert next(probes) == 4e10  # the third probe was never taken


def test_a_cache_of_bare_figures_is_read_and_probed_again(tmp_path, monkeypatch):
    monkeypatch.setenv("VERL_CACHE_DIR", str(tmp_path))
    key = f"{peak_flops._cpu_model()}|float32|2|linear"
    (tmp_path / "peak_flops.json").write_text(json.dumps({key: 7e10}))
    monkeypatch.setattr(peak_flops, "_load_average", lambda: 0.5)
    monkeypatch.setattr(peak_flops, "_measure", lambda dtype, threads: 6e10)
    assert peak_flops.cpu_peak_flops(torch.float32, threads=2).flops == 7e10  # never lowered by a later probe
    assert json.loads((tmp_path / "peak_flops.json").read_text())[key] == {"flops": 7e10, "load": 0.5}


def test_the_gemm_probe_measures_a_plausible_peak():
    measured = peak_flops._measure(torch.float32, threads=1)
    assert 1e8 < measured < 1e13  # between 0.1 GFLOP/s and 10 TFLOP/s for one CPU thread


def test_the_probe_times_the_product_linear_layers_compute(monkeypatch):
    # a bf16 `a @ b` takes a scalar fallback on CPUs without native bf16 (30x slower than a linear layer's x @ W.T
    # there): probing it put bf16 MFU far over 100%
    shapes = []
    real_linear = torch.nn.functional.linear
    monkeypatch.setattr(torch.nn.functional, "linear", lambda a, b: shapes.append(b.shape) or real_linear(a, b))
    monkeypatch.setattr(peak_flops, "_PROBE_SECONDS", 0.01)
    peak_flops._measure(torch.bfloat16, threads=1)
    assert shapes and shapes[0] == (peak_flops._PROBE_N, peak_flops._PROBE_N)


def test_phase_mfu_builds_for_a_cpu_run(tmp_path, monkeypatch):
    from verl.demo.tiny_model import make_tiny_model_dir
    from verl.trainer.config import PPOConfig

    monkeypatch.setenv("VERL_CACHE_DIR", str(tmp_path))
    monkeypatch.setattr(peak_flops, "_measure", lambda dtype, threads: 4e10)
    model = make_tiny_model_dir(str(tmp_path / "m"), hidden_size=32, num_layers=1, num_heads=2, num_kv_heads=1)
    config = PPOConfig.from_config({"trainer": {"device": "cpu", "nnodes": 1, "n_gpus_per_node": 2}})
    mfu = PhaseMFU.build(config, model)
    assert mfu.devices == 1 and mfu.peak_flops == 4e10  # the two CPU workers share the host's peak
    metrics = mfu.metrics(DataProto(meta_info={"global_token_num": [20] * 8}), {"update_actor": 0.5})
    assert 0 < metrics["perf/mfu/update_actor"] < 1
