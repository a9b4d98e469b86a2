"""scripts/benchmark/bench_gpu_throughput.py with its tiny shape: the three phases run and report sane figures."""

import json

import pytest
import torch.distributed as dist

from tests.benchmark_scripts import load_benchmark


@pytest.fixture
def bench():
    yield load_benchmark("bench_gpu_throughput")
    if dist.is_initialized():  # the worker joined a process group of one in this process
        dist.destroy_process_group()


def test_tiny_benchmark_reports_every_phase(bench, capsys):
    args = bench.parse_args(["--tiny", "--repeats", "1", "--batch", "4", "--response-length", "6"])
    figures = bench.run(args)
    assert [f["phase"] for f in figures] == ["generate", "compute_log_prob", "update_actor"]
    gen, log_prob, update = figures
    # 4 prompts x at most 6 new tokens; log-prob and update see every prompt and response token
    assert 0 < gen["tokens"] <= 24
    assert log_prob["tokens"] == update["tokens"] > gen["tokens"]
    for figure in figures:
        assert figure["tokens_per_s"] == pytest.approx(figure["tokens"] / figure["seconds"], rel=0.01)
        assert figure["tflops"] > 0 and 0 <= figure["mfu"] < 1
        assert figure["params_m"] > 0 and figure["shape"] == "tiny"
        assert ("peak_device_gb" in figure) != ("peak_rss_gb" in figure)
    if figures[0]["device"] == "cpu":  # the host's measured GEMM peak
        assert all(f["mfu"] > 0 and "GEMM" in f["peak_source"] for f in figures)
    # the same figures as JSON lines on stdout, one per phase
    lines = [json.loads(x) for x in capsys.readouterr().out.splitlines() if x.startswith("{")]
    assert [x["figure"] for x in lines] == [f"gpu_throughput_{f['phase']}" for f in figures]
