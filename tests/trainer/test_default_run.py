"""The embedded default: ``python -m verl.trainer.main_ppo`` with no overrides but a shorter run.

Only ``trainer.total_training_steps`` is changed (the full run is scripts/benchmark/bench_default_run.py); the data,
the model, GRPO, the HF rollout, the 2 CPU workers, the validation before and after training all come from the
shipped defaults, and the checkpoint folder lands in the working directory as it would for a newcomer.
"""

import os

import pytest

from tests.trainer.ppo_e2e_utils import run_main_ppo
from verl.demo.assets import resolve_builtin_path
from verl.trainer.report.run_report import load_history

VAL_KEY = "val-core/verl/arithmetic/reward/mean@1"


def test_builtin_assets_are_installed():
    model = resolve_builtin_path("builtin://default_model")
    assert os.path.isfile(os.path.join(model, "config.json"))
    assert os.path.isfile(os.path.join(model, "model.safetensors"))
    assert os.path.getsize(os.path.join(model, "model.safetensors")) < 20 * 2**20
    for split in ("train", "test"):
        assert os.path.isfile(resolve_builtin_path(f"builtin://arithmetic/{split}.parquet"))


@pytest.mark.timeout(600)
def test_default_run_validates_trains_and_reports(tmp_path):
    result = run_main_ppo(["trainer.total_training_steps=2"], cwd=str(tmp_path), timeout=600)
    assert result.returncode == 0, result.stderr[-4000:]
    run_dir = tmp_path / "checkpoints" / "verl_examples" / "arithmetic"
    # the console shows one readable line per step; every metric is in metrics.jsonl
    lines = [line[line.index("step ") :] for line in result.stdout.splitlines() if "step " in line and " | " in line]
    assert [line.split(" | ")[0] for line in lines] == ["step 1/2", "step 2/2"], result.stdout[-2000:]
    assert all("reward " in line and "tok/s" in line and "ETA" in line for line in lines), lines
    assert "val " in lines[1] and "actor/pg_loss" not in result.stdout
    steps = [{"step": r["step"], **r["metrics"]} for r in load_history(str(run_dir / "metrics.jsonl"))]
    validations = {int(s["step"]): s[VAL_KEY] for s in steps if VAL_KEY in s}
    # validated before training (step 0) and after the last step (2); the score is an accuracy in [0, 1]
    assert sorted(validations) == [0, 2], validations
    assert all(0.0 <= v <= 1.0 for v in validations.values())
    trained = [s for s in steps if "actor/pg_loss" in s]
    assert [int(s["step"]) for s in trained] == [1, 2]
    # GRPO groups of 8 samples: the shipped SFT model gets some right and some wrong, so rewards vary
    assert all(0.0 < s["critic/score/mean"] < 1.0 for s in trained)
