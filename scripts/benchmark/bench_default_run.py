"""Run the FULL built-in default (``python -m verl.trainer.main_ppo``, no overrides) and report its figures.

    python scripts/benchmark/bench_default_run.py [--curve_out docs/images/default_run_curve.png] [override ...]

Prints one JSON line per figure: wall time, validation score (greedy exact-match accuracy on the 200 held-out
problems) before and after training, the rise, and the final training reward. Extra arguments are passed to
main_ppo as Hydra overrides (for experiments; the documented figures use none). The run's folder (metrics.jsonl,
learning_curve.png, report.md) is kept under --work_dir.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
VAL_KEY = "val-core/verl/arithmetic/reward/mean@1"
RUN_DIR = os.path.join("checkpoints", "verl_examples", "arithmetic")


def _history(run_dir: str) -> list[dict]:
    """The run reporter's metrics.jsonl as a list of dicts."""
    path = os.path.join(run_dir, "metrics.jsonl")
    with open(path) as f:
        records = [json.loads(line) for line in f if line.strip()]
    # RunReporter records are {"step", "kind", "metrics": {...}}; flatten them.
    return [{"step": r["step"], **r.get("metrics", {})} for r in records]


def _emit(name: str, value, unit: str = "") -> None:
    print(json.dumps({"figure": name, "value": value, "unit": unit}), flush=True)


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--work_dir", default=None, help="working directory of the run (default: a new temp dir)")
    parser.add_argument("--curve_out", default=None, help="copy learning_curve.png here")
    parser.add_argument("--timeout", type=int, default=3600)
    args, overrides = parser.parse_known_args(argv)
    work_dir = args.work_dir or tempfile.mkdtemp(prefix="verl_default_run_")
    os.makedirs(work_dir, exist_ok=True)
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(filter(None, [REPO, os.environ.get("PYTHONPATH")])))
    start = time.time()
    with open(os.path.join(work_dir, "stdout.log"), "w") as out, open(os.path.join(work_dir, "stderr.log"), "w") as err:
        proc = subprocess.run(
            [sys.executable, "-m", "verl.trainer.main_ppo", *overrides],
            cwd=work_dir,
            env=env,
            stdout=out,
            stderr=err,
            timeout=args.timeout,
        )
    wall = time.time() - start
    _emit("default_run_wall_time", round(wall, 1), "s")
    if proc.returncode != 0:
        _emit("default_run_exit_code", proc.returncode)
        print(f"main_ppo failed; see {work_dir}/stderr.log", file=sys.stderr)
        return proc.returncode
    run_dir = os.path.join(work_dir, RUN_DIR)
    history = _history(run_dir)
    # a validation appears in its own record and again in that step's training record: keep one per step
    validations = sorted({h["step"]: h[VAL_KEY] for h in history if VAL_KEY in h}.items())
    (first_step, before), (last_step, after) = validations[0], validations[-1]
    _emit("val_score_before", round(before, 4), f"exact-match accuracy at step {first_step}")
    _emit("val_score_after", round(after, 4), f"exact-match accuracy at step {last_step}")
    _emit("val_score_rise", round(after - before, 4), "absolute")
    scores = [h["critic/score/mean"] for h in history if "critic/score/mean" in h]
    if scores:
        _emit("train_reward_first_step", round(scores[0], 4))
        _emit("train_reward_last_step", round(scores[-1], 4))
    _emit("validation_curve", [[int(s), round(v, 4)] for s, v in validations])
    curve = os.path.join(run_dir, "learning_curve.png")
    if args.curve_out and os.path.isfile(curve):
        os.makedirs(os.path.dirname(os.path.abspath(args.curve_out)), exist_ok=True)
        shutil.copy(curve, args.curve_out)
    _emit("run_dir", run_dir)
    return 0


if __name__ == "__main__":
    sys.exit(main())
