"""The compact console line and the console tracker's choice between it and verl's full line."""

import pytest

from verl.utils.console_line import StepLine
from verl.utils.tracking import Tracking


def _step_metrics(step: int, **extra) -> dict:
    return {
        "training/global_step": step,
        "training/epoch": 1,
        "critic/score/mean": 0.6534,
        "critic/rewards/mean": 0.1,
        "timing_s/step": 2.5,
        "perf/total_num_tokens": 5000,
        "actor/pg_loss": 0.25,
        **extra,
    }


class _Clock:
    def __init__(self):
        self.now = 100.0

    def __call__(self):
        return self.now


def test_step_line_fields_and_eta_from_wall_clock():
    clock = _Clock()
    line = StepLine(total_steps=10, clock=clock)
    first = line.format(_step_metrics(1), step=1)
    # first step: ETA from its own step time, 9 steps left x 2.5 s
    assert first == "step 1/10 | epoch 1 | reward 0.653 | 2.50 s/step | 2,000 tok/s | ETA 22s"
    clock.now += 60.0  # steps 2..4 took 20 s each by the wall clock
    fourth = line.format(_step_metrics(4, **{"val-core/verl/arithmetic/reward/mean@1": 0.85}), step=4)
    assert fourth == "step 4/10 | epoch 1 | reward 0.653 | val 0.850 | 2.50 s/step | 2,000 tok/s | ETA 2m00s"
    assert "pg_loss" not in fourth


def test_step_line_without_total_and_validation_only_dicts():
    line = StepLine(total_steps=-1)
    assert line.format({"training/global_step": 3, "critic/score/mean": 1.0}, step=3) == "step 3 | reward 1.000"
    assert line.format({"val-core/a/reward/mean@1": 0.5, "val-aux/a/x": 2.0}, step=0) == (
        "validation @ step 0: score 0.500"
    )


@pytest.mark.parametrize("fmt", ["compact", "full", None])
def test_console_tracker_prints_compact_or_full(fmt, capsys):
    config = {"trainer": {"total_training_steps": 10}}
    if fmt is not None:
        config["trainer"]["console_format"] = fmt
    tracker = Tracking("p", "e", default_backend="console", config=config)
    tracker.log(_step_metrics(2), step=2)
    out = capsys.readouterr().out.strip()
    assert out.count("\n") == 0
    if fmt == "compact":
        assert out.startswith("step 2/10 | epoch 1 | reward 0.653") and "pg_loss" not in out
    else:  # verl's line, also when a caller's config has no such key
        assert "actor/pg_loss" in out and "critic/rewards/mean" in out
