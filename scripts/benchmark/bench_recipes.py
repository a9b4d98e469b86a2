"""Every recipe and policy loss against plain GRPO on the built-in arithmetic task, several seeds each.

    python scripts/benchmark/bench_recipes.py [--seeds 1 2 3] [--steps 30] [--only grpo dapo ...]
                                              [--markdown docs/recipes_table.md]

Each variant is one entry point (``verl.trainer.main_ppo`` or a recipe's ``main_<name>``) with the built-in
defaults (the shipped 1.05M-parameter model, two-number addition, 2 CPU workers) plus the overrides that make it
that variant. For every (variant, seed) run the script prints one JSON line: the final validation score (greedy
exact-match accuracy on the 200 held-out problems), the first step whose validation reaches the threshold, and the
wall time. Then it prints, and writes with ``--markdown``, a table of the mean and spread over seeds.

Seeds move the training sampler's shuffle (``data.seed``) and the rollout's sampling seed, so the runs differ in
data order and samples while the starting model stays the shipped one.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import statistics
import subprocess
import sys
import tempfile
import time

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
# The core validation metric: mean reward over the N samples per prompt (N is val_kwargs.n: 1 for most variants,
# 2 for SPPO, whose config samples twice at validation). A mean is comparable across N.
VAL_KEY = re.compile(r"^val-core/verl/arithmetic/reward/mean@\d+$")

# name -> (module run with python -m, overrides that make the variant). Shared overrides (steps, seeds, logging)
# are added by the script. Each recipe's own config composes ppo_trainer.yaml, so the built-in task is its default.
VARIANTS: dict[str, tuple[str, list[str]]] = {
    "grpo": ("verl.trainer.main_ppo", []),
    "dr_grpo": (
        "verl.trainer.main_ppo",
        [
            "algorithm.norm_adv_by_std_in_grpo=False",
            "actor_rollout_ref.actor.loss_agg_mode=seq-mean-token-sum-norm",
            "actor_rollout_ref.actor.use_kl_loss=False",
        ],
    ),
    "gspo": ("verl.trainer.main_ppo", ["actor_rollout_ref.actor.policy_loss.loss_mode=gspo"]),
    "gpg": ("verl.trainer.main_ppo", ["actor_rollout_ref.actor.policy_loss.loss_mode=gpg"]),
    "gmpo": ("verl.trainer.main_ppo", ["actor_rollout_ref.actor.policy_loss.loss_mode=geo_mean"]),
    "sapo": ("verl.trainer.main_ppo", ["actor_rollout_ref.actor.policy_loss.loss_mode=sapo"]),
    "cispo": ("verl.trainer.main_ppo", ["actor_rollout_ref.actor.policy_loss.loss_mode=cispo"]),
    "clip_cov": ("verl.trainer.main_ppo", ["actor_rollout_ref.actor.policy_loss.loss_mode=clip_cov"]),
    "kl_cov": ("verl.trainer.main_ppo", ["actor_rollout_ref.actor.policy_loss.loss_mode=kl_cov"]),
    "dapo": ("recipe.dapo.main_dapo", []),
    "entropy": ("recipe.entropy.main_entropy", []),
    "prime": ("recipe.prime.main_prime", []),
    "sppo": ("recipe.sppo.main_sppo", []),
    "spin": ("recipe.spin.main_spin", []),
}


def _validations(run_dir: str) -> list[tuple[int, float]]:
    """(step, validation score) pairs from the run reporter's metrics.jsonl, one per step."""
    with open(os.path.join(run_dir, "metrics.jsonl")) as f:
        records = [json.loads(line) for line in f if line.strip()]
    scores = {}
    for record in records:
        for key, value in record.get("metrics", {}).items():
            if VAL_KEY.match(key):
                scores[int(record["step"])] = float(value)
    return sorted(scores.items())


def run_variant(name: str, seed: int, steps: int, test_freq: int, work_root: str, timeout: int) -> dict:
    """One training run of ``name`` with ``seed``; returns its figures (or its exit code on failure)."""
    module, overrides = VARIANTS[name]
    work_dir = os.path.join(work_root, f"{name}_seed{seed}")
    os.makedirs(work_dir, exist_ok=True)
    run_dir = os.path.join(work_dir, "run")
    common = [
        f"trainer.total_training_steps={steps}",
        f"trainer.test_freq={test_freq}",
        f"trainer.default_local_dir={run_dir}",
        "trainer.resume_mode=disable",
        f"+data.seed={seed}",
        f"+actor_rollout_ref.rollout.seed={seed}",
    ]
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(filter(None, [REPO, os.environ.get("PYTHONPATH")])))
    start = time.time()
    with open(os.path.join(work_dir, "stdout.log"), "w") as out, open(os.path.join(work_dir, "stderr.log"), "w") as err:
        proc = subprocess.run(
            [sys.executable, "-m", module, *overrides, *common],
            cwd=work_dir,
            env=env,
            stdout=out,
            stderr=err,
            timeout=timeout,
        )
    wall = time.time() - start
    result = {"variant": name, "seed": seed, "wall_s": round(wall, 1)}
    if proc.returncode != 0:
        result["exit_code"] = proc.returncode
        result["log"] = os.path.join(work_dir, "stderr.log")
        return result
    validations = _validations(run_dir)
    result["val_before"] = round(validations[0][1], 4)
    result["val_final"] = round(validations[-1][1], 4)
    result["curve"] = [[s, round(v, 4)] for s, v in validations]
    return result


def steps_to(curve: list[list], threshold: float) -> int | None:
    """The first step whose validation score reaches ``threshold`` (None if no validation does)."""
    return next((step for step, score in curve if score >= threshold), None)


def _mean_sd(values: list[float]) -> str:
    if len(values) == 1:
        return f"{values[0]:.3f}"
    return f"{statistics.mean(values):.3f} ± {statistics.stdev(values):.3f}"


def summary_table(results: list[dict], threshold: float, steps: int) -> str:
    """A markdown table: per variant, final validation score, steps to the threshold and wall time over seeds."""
    lines = [
        f"| variant | final validation (mean ± sd) | steps to {threshold} (per seed) | wall time s (mean) | runs |",
        "|---|---|---|---|---|",
    ]
    for name in dict.fromkeys(r["variant"] for r in results):
        runs = [r for r in results if r["variant"] == name]
        ok = [r for r in runs if "exit_code" not in r]
        if not ok:
            lines.append(f"| {name} | failed | - | - | 0/{len(runs)} |")
            continue
        reached = [steps_to(r["curve"], threshold) for r in ok]
        reached_txt = ", ".join(str(s) if s is not None else f">{steps}" for s in reached)
        wall = statistics.mean(r["wall_s"] for r in ok)
        finals = _mean_sd([r["val_final"] for r in ok])
        lines.append(f"| {name} | {finals} | {reached_txt} | {wall:.0f} | {len(ok)}/{len(runs)} |")
    return "\n".join(lines) + "\n"


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seeds", type=int, nargs="+", default=[1, 2, 3])
    parser.add_argument("--steps", type=int, default=30, help="training steps per run")
    parser.add_argument("--test_freq", type=int, default=5)
    parser.add_argument("--threshold", type=float, default=0.9, help="validation score for 'steps to'")
    parser.add_argument("--only", nargs="+", choices=sorted(VARIANTS), help="run only these variants")
    parser.add_argument("--work_dir", default=None)
    parser.add_argument("--markdown", default=None, help="write the summary table to this file")
    parser.add_argument("--timeout", type=int, default=1800, help="seconds per run")
    args = parser.parse_args(argv)
    work_root = args.work_dir or tempfile.mkdtemp(prefix="verl_bench_recipes_")
    results = []
    for name in args.only or list(VARIANTS):
        for seed in args.seeds:
            result = run_variant(name, seed, args.steps, args.test_freq, work_root, args.timeout)
            print(json.dumps(result), flush=True)
            results.append(result)
    table = summary_table(results, args.threshold, args.steps)
    print(table)
    if args.markdown:
        with open(args.markdown, "w") as f:
            f.write(table)
    return 0 if all("exit_code" not in r for r in results) else 1


if __name__ == "__main__":
    sys.exit(main())
