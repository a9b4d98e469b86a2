"""The calc_tool recipe end to end (data, tiny model, multi-turn SFT, multi-turn GRPO with the calculator tool).

    python scripts/benchmark/bench_calc_tool.py [--work_dir DIR] [--sft_steps 600] [--grpo_steps 40] [--seed 0]
                                                [--grpo_override key=value ...]

Prints one JSON line per figure: the greedy exact-answer accuracy on the 200 held-out problems before and after GRPO
(the run's ``val-core/calc_tool/reward/mean@1`` at its first and last validation) and their difference, assistant
turns and tool calls per trajectory (first and last 5 steps), tool calls per second of rollout, the share of step
time spent in tools, and the wall time of each stage. The figures come from the step metrics ``multi_turn/*`` and
``timing_s/*`` in ``metrics.jsonl`` under the GRPO run's ``trainer.default_local_dir``. The baseline for the
accuracy rise is the same run's own step-0 validation, so the ratio is immune to how loaded the machine is.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
RECIPE = os.path.join(REPO, "recipe", "calc_tool")
VAL_KEY = "val-core/calc_tool/reward/mean@1"
# trajectories per GRPO step in train_grpo.sh (data.train_batch_size=16, rollout.n=8): tool_calls_mean is per one
TRAJECTORIES_PER_STEP = 16 * 8


def _run(cmd: list[str], log: str, env: dict, timeout: int) -> float:
    """Run ``cmd`` with its output in ``log``; returns the wall time, raises on failure."""
    start = time.time()
    with open(log, "w") as out:
        proc = subprocess.run(cmd, cwd=REPO, env=env, stdout=out, stderr=subprocess.STDOUT, timeout=timeout)
    if proc.returncode != 0:
        raise RuntimeError(f"{' '.join(cmd[:4])} ... failed with exit code {proc.returncode}; see {log}")
    return time.time() - start


def load_metrics(run_dir: str) -> tuple[dict[int, dict], dict[int, float]]:
    """``({step: train metrics}, {step: validation accuracy})`` from the run's metrics.jsonl (last record wins)."""
    train, val = {}, {}
    with open(os.path.join(run_dir, "metrics.jsonl")) as f:
        for line in f:
            if not line.strip():
                continue
            record = json.loads(line)
            metrics, step = record.get("metrics", {}), int(record["step"])
            if VAL_KEY in metrics:
                val[step] = float(metrics[VAL_KEY])
            if record.get("kind", "train") == "train":
                train[step] = metrics
    return train, val


def figures(train: dict[int, dict], val: dict[int, float]) -> dict[str, float]:
    """The benchmark's figures from the GRPO run's metrics (see the module docstring)."""
    steps = sorted(train)
    first, last = steps[:5], steps[-5:]

    def mean(key: str, which: list[int]) -> float:
        values = [train[s][key] for s in which if key in train[s]]
        return round(statistics.mean(values), 4) if values else float("nan")

    batch = {s: train[s].get("multi_turn/tool_calls_mean", 0.0) * TRAJECTORIES_PER_STEP for s in steps}
    tool_s = sum(train[s].get("multi_turn/tool_seconds", 0.0) for s in steps)
    gen_s = sum(train[s].get("timing_s/gen", 0.0) for s in steps)
    step_s = sum(train[s].get("timing_s/step", 0.0) for s in steps)
    before, after = val[min(val)], val[max(val)]
    return {
        "accuracy_before_grpo": round(before, 4),
        "accuracy_after_grpo": round(after, 4),
        "accuracy_rise": round(after - before, 4),
        "best_validation": round(max(val.values()), 4),
        "validation_curve": [[s, round(v, 4)] for s, v in sorted(val.items())],
        "assistant_turns_per_trajectory_first5": mean("multi_turn/assistant_turns_mean", first),
        "assistant_turns_per_trajectory_last5": mean("multi_turn/assistant_turns_mean", last),
        "tool_calls_per_trajectory_first5": mean("multi_turn/tool_calls_mean", first),
        "tool_calls_per_trajectory_last5": mean("multi_turn/tool_calls_mean", last),
        "tool_calls_per_rollout_second": round(sum(batch.values()) / gen_s, 2) if gen_s else float("nan"),
        # multi_turn/tool_seconds is rank 0's (both workers roll out at once), summed over each trajectory's span
        # of concurrent tool calls; the spans of concurrent trajectories overlap, so this share is an upper bound
        "tool_share_of_step_time_upper_bound": round(tool_s / step_s, 5) if step_s else float("nan"),
        "grpo_step_s_median": round(statistics.median(train[s]["timing_s/step"] for s in steps), 2),
    }


def calculator_seconds_per_call(data_dir: str) -> float:
    """Mean seconds of one ``CalculatorTool.execute`` on the held-out expressions, in this process."""
    import asyncio

    import pandas as pd

    from recipe.calc_tool.calculator import CalculatorTool

    tool = CalculatorTool({})
    expressions = [p[0]["content"] for p in pd.read_parquet(os.path.join(data_dir, "test.parquet")).prompt]

    async def run_all() -> None:
        for expression in expressions:
            await tool.execute("bench", {"expression": expression})

    start = time.perf_counter()
    asyncio.run(run_all())
    return (time.perf_counter() - start) / len(expressions)


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--work_dir", default=None, help="where data, models and logs go (a temp dir by default)")
    parser.add_argument("--sft_steps", type=int, default=600)
    parser.add_argument("--grpo_steps", type=int, default=40)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--grpo_override", nargs="*", default=[], help="extra Hydra overrides for the GRPO stage")
    parser.add_argument("--timeout", type=int, default=3600)
    args = parser.parse_args(argv)
    work = args.work_dir or tempfile.mkdtemp(prefix="bench_calc_tool_")
    os.makedirs(work, exist_ok=True)
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(filter(None, [REPO, os.environ.get("PYTHONPATH")])))
    env["SFT_STEPS"] = str(args.sft_steps)
    data, init, sft, grpo = (os.path.join(work, name) for name in ("data", "init", "sft", "grpo"))
    py = sys.executable
    walls = {
        "data_and_model": _run(
            [py, "-m", "recipe.calc_tool.create_dataset", "--local_dir", data, "--seed", str(args.seed)],
            os.path.join(work, "data.log"),
            env,
            args.timeout,
        )
    }
    walls["data_and_model"] += _run(
        [py, "-m", "recipe.calc_tool.init_model", "--out", init, "--seed", str(args.seed)],
        os.path.join(work, "init.log"),
        env,
        args.timeout,
    )
    walls["sft"] = _run(
        ["bash", os.path.join(RECIPE, "train_sft.sh"), init, data, sft],
        os.path.join(work, "sft.log"),
        env,
        args.timeout,
    )
    grpo_cmd = ["bash", os.path.join(RECIPE, "train_grpo.sh"), os.path.join(sft, f"global_step_{args.sft_steps}"), data]
    grpo_cmd += [
        f"trainer.default_local_dir={grpo}",
        f"trainer.total_training_steps={args.grpo_steps}",
        "trainer.resume_mode=disable",
        f"+data.seed={args.seed}",
        f"+actor_rollout_ref.rollout.seed={args.seed}",
        *args.grpo_override,
    ]
    walls["grpo"] = _run(grpo_cmd, os.path.join(work, "grpo.log"), env, args.timeout)
    train, val = load_metrics(grpo)
    results = figures(train, val)
    per_call = calculator_seconds_per_call(data)
    calls = sum(train[s].get("multi_turn/tool_calls_mean", 0.0) * TRAJECTORIES_PER_STEP for s in train)
    results["calculator_us_per_call"] = round(per_call * 1e6, 1)
    # the calculator's own time for every call of the run (split over 2 workers) against the run's step time
    step_s = sum(train[s].get("timing_s/step", 0.0) for s in train)
    results["tool_share_of_step_time_calculator_only"] = round(calls * per_call / 2 / step_s, 6)
    results.update({f"wall_s_{k}": round(v, 1) for k, v in walls.items()})
    results["wall_s_total"] = round(sum(walls.values()), 1)
    for name, value in results.items():
        print(json.dumps({"figure": name, "value": value}))


if __name__ == "__main__":
    main()
