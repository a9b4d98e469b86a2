"""Tests for verl.trainer.report.run_report: progress bar with ETA, metrics.jsonl (and resume), learning-curve PNG,
report.md."""

import io
import json
import logging
import struct
import sys

import pytest
import torch

from verl.trainer.report import run_report
from verl.trainer.report.run_report import RunReporter, load_history, write_learning_curve

VAL_KEY = "val-core/openai/gsm8k/reward/mean@1"


def _step_metrics(step: int) -> dict:
    return {
        "critic/score/mean": 0.1 * step,
        "actor/ppo_kl": torch.tensor(0.001 * step),  # 0-d tensors are numbers too
        "actor/entropy": 1.0 - 0.05 * step,
        "response_length/mean": 100.0 + step,
        "timing_s/step": 2.5,
        "training/global_step": step,
        "note": "not a number",
    }


def _run(tmp_path, steps=range(1, 6), initial_step=0, total=5):
    bar_out = io.StringIO()
    reporter = RunReporter(
        str(tmp_path), total_steps=total, initial_step=initial_step, run_name="gsm8k-grpo", progress_file=bar_out
    )
    for step in steps:
        reporter.on_step(step, _step_metrics(step))
    return reporter, bar_out


def _png_size(path) -> tuple[int, int]:
    data = open(path, "rb").read()
    assert data[:8] == b"\x89PNG\r\n\x1a\n" and data[12:16] == b"IHDR"
    return struct.unpack(">II", data[16:24])


def test_full_run_writes_curve_report_and_progress(tmp_path):
    pytest.importorskip("matplotlib", reason="matplotlib not installed (pip install matplotlib)")
    bar_out = io.StringIO()
    reporter = RunReporter(str(tmp_path), total_steps=5, run_name="gsm8k-grpo", progress_file=bar_out)
    reporter.on_validation(0, {VAL_KEY: 0.2, "val-aux/openai/gsm8k/reward/std@1": 0.0})
    for step in range(1, 6):
        reporter.on_step(step, _step_metrics(step))
        if step == 3:
            reporter.on_validation(3, {VAL_KEY: 0.75})
    reporter.on_validation(5, {VAL_KEY: 0.625})
    paths = reporter.finish()
    assert reporter.finish() == {}  # idempotent

    assert _png_size(paths["curve"]) == (1500, 800)
    assert (tmp_path / "learning_curve.png").stat().st_size > 20_000  # six drawn panels, not a blank image

    progress = bar_out.getvalue()
    assert "ETA" in progress and "5/5" in progress and "score=0.5" in progress

    report = (tmp_path / "report.md").read_text()
    assert report.startswith("# Run report: gsm8k-grpo")
    assert "- Training steps: 5 / 5" in report
    assert f"| `{VAL_KEY}` | 0.2 (step 0) | 0.625 (step 5) | 0.75 (step 3) |" in report
    assert "![learning curves](learning_curve.png)" in report
    assert "## Final metrics (step 5)" in report
    assert "| `critic/score/mean` | 0.5 |" in report and "| `actor/ppo_kl` | 0.005 |" in report
    assert "| `response_length/mean` | 105 |" in report and "note" not in report


def test_metrics_jsonl_records_every_step(tmp_path):
    reporter, _ = _run(tmp_path, steps=range(1, 4))
    reporter.on_validation(3, {VAL_KEY: 0.5})
    lines = [json.loads(line) for line in (tmp_path / "metrics.jsonl").read_text().splitlines()]
    assert [(r["kind"], r["step"]) for r in lines] == [("train", 1), ("train", 2), ("train", 3), ("val", 3)]
    assert lines[1]["metrics"]["actor/ppo_kl"] == pytest.approx(0.002)
    assert "note" not in lines[1]["metrics"]
    assert lines[3]["metrics"] == {VAL_KEY: 0.5}


def test_resume_keeps_history_up_to_the_checkpoint(tmp_path):
    first, _ = _run(tmp_path, steps=range(1, 5))  # crashed after step 4, checkpoint at step 2
    first.on_validation(2, {VAL_KEY: 0.3})
    first._bar.close()
    resumed, bar_out = _run(tmp_path, steps=[3, 4, 5], initial_step=2)
    # steps 3 and 4 of the crashed run are gone; the rerun's steps replace them exactly once
    assert [(r["kind"], r["step"]) for r in load_history(str(tmp_path / "metrics.jsonl"))] == [
        ("train", 1),
        ("val", 2),
        ("train", 2),
        ("train", 3),
        ("train", 4),
        ("train", 5),
    ]
    assert [(r["kind"], r["step"]) for r in resumed.history][:3] == [("train", 1), ("val", 2), ("train", 2)]
    paths = resumed.finish()
    assert "5/5" in bar_out.getvalue()
    assert f"| `{VAL_KEY}` | 0.3 (step 2) | 0.3 (step 2) | 0.3 (step 2) |" in open(paths["report"]).read()


def test_load_history_skips_a_truncated_line_and_keeps_the_last_duplicate(tmp_path):
    path = tmp_path / "metrics.jsonl"
    rows = [
        {"kind": "train", "step": 1, "metrics": {"a": 1.0}},
        {"kind": "train", "step": 1, "metrics": {"a": 2.0}},
    ]
    path.write_text("".join(json.dumps(r) + "\n" for r in rows) + '{"kind": "train", "st')
    assert load_history(str(path)) == [rows[1]]


def test_write_learning_curve_accepts_flat_records(tmp_path):
    pytest.importorskip("matplotlib", reason="matplotlib not installed (pip install matplotlib)")
    history = [{"step": s, "critic/rewards/mean": float(s), "val-core/x/acc/mean@4": 0.1 * s} for s in range(1, 4)]
    assert write_learning_curve(history, str(tmp_path / "sub" / "c.png"), title="flat")
    assert _png_size(tmp_path / "sub" / "c.png") == (1500, 800)


def test_missing_matplotlib_is_reported_once_and_skipped(tmp_path, monkeypatch, caplog):
    monkeypatch.setitem(sys.modules, "matplotlib.figure", None)  # import fails as if not installed
    monkeypatch.setattr(run_report, "_warned_no_matplotlib", False)
    with caplog.at_level(logging.WARNING, logger="verl.trainer.report.run_report"):
        assert write_learning_curve([{"step": 1, "a": 1.0}], str(tmp_path / "a.png")) is False
        reporter, _ = _run(tmp_path, steps=[1])
        paths = reporter.finish()
    assert "curve" not in paths and not (tmp_path / "learning_curve.png").exists()
    assert "learning_curve.png" not in open(paths["report"]).read()
    assert sum("matplotlib is not installed" in r.message for r in caplog.records) == 1


def test_disabled_reporter_writes_nothing(tmp_path):
    out = tmp_path / "never"
    reporter = RunReporter(str(out), total_steps=3, enabled=False)
    reporter.on_validation(0, {VAL_KEY: 1.0})
    reporter.on_step(1, {"x": 1.0})
    assert reporter.finish() == {} and not out.exists()


def test_step_time_table_shares_phases_tokens_and_memory():
    from verl.trainer.report.run_report import step_time_table

    def step(n, gen):
        return (
            n,
            {
                "timing_s/step": 10.0,
                "timing_s/gen": gen,
                "timing_s/generate_sequences": gen - 0.5,  # nested in gen: not counted again
                "timing_s/update_actor": 6.0,
                "timing_s/worker/update_actor": 5.5,
                "perf/total_num_tokens": 2000,
                "timing_per_token_ms/gen": 4.0,
                "perf/peak_rss_gb/worker": 3.25,
                "perf/peak_rss_gb/trainer": 0.5,
                "perf/achieved_tflops/update_actor": 0.012,
                "perf/mfu/update_actor": 0.15,
                "perf/peak_tflops": 0.08,
            },
        )

    lines = step_time_table([step(1, 9.0), step(2, 3.0), step(3, 3.0)])  # step 1 (warm-up) is left out
    text = "\n".join(lines)
    assert "median of 2 steps" in text
    assert "| gen | 3.000 | 30.0% |  |  |" in text and "| update_actor | 6.000 | 60.0% | 0.012 | 15.0% |" in text
    assert "peak of 0.08 TFLOP/s" in text
    assert "| other (controller, transfers) | 1.000 | 10.0% |" in text
    assert "generate_sequences" not in text and "worker/" not in text
    assert "Tokens per second (prompt + response, whole job): 200.0" in text
    assert "Generated tokens per second during generation: 250.0" in text
    assert "worker: 3.25 GB" in text and "trainer: 0.50 GB" in text
    assert step_time_table([]) == []


def test_kl_panel_plots_the_kl_the_run_optimises():
    """ppo_kl (old vs current policy) is zero for an on-policy step; the panel shows the KL to the reference."""
    from verl.trainer.report.run_report import CURVE_PANELS, _panel_keys

    keys = dict(CURVE_PANELS)["KL to reference"]
    entries = [(1, {"actor/ppo_kl": 0.0, "actor/kl_loss": 0.02}), (2, {"actor/reward_kl_penalty": 0.01})]
    assert _panel_keys(entries, keys) == ["actor/kl_loss", "actor/reward_kl_penalty"]
