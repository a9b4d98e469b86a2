"""The one-step off-policy trainer against the synchronous trainers on the same work: the built-in demo task.

    python scripts/benchmark/bench_one_step_off_policy.py [--steps 20] [--modes hybrid_sync,standalone_sync,one_step]
        [--timeline_out docs/images/one_step_off_policy_timeline.png] [--from_json saved_output.jsonl]

Each mode runs the demo (GRPO on the shipped arithmetic task and model, same seed, same steps, validation before
training and after the last step) in a subprocess, on CPU unless a GPU is visible:

* ``hybrid_sync``: ``verl.trainer.main_ppo`` with one worker process holding actor and rollout (the hybrid engine);
* ``standalone_sync``: ``verl.trainer.main_ppo actor_rollout_ref.hybrid_engine=False``: one trainer process, one
  rollout process, weights through the checkpoint engine after every update, generation and update in turn;
* ``one_step``: ``recipe.one_step_off_policy.main_ppo``, the same two processes, batch k+1 generating while batch k
  trains.

Prints one JSON line per step and mode (generation seconds, update seconds, overlap seconds, wait for the previous
generation, checkpoint-engine bytes and seconds of the sync), then per mode: wall time, mean step time (steps 2..N),
final validation score, and the ratios of the one-step trainer against each synchronous one (same run, same
machine). The runs' folders (metrics.jsonl, stdout/stderr) stay under --work_dir.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
VAL_KEY = "val-core/verl/arithmetic/reward/mean@1"
RUN_DIR = os.path.join("checkpoints", "verl_examples", "arithmetic")
MODES = {
    "hybrid_sync": ("verl.trainer.main_ppo", ["trainer.n_gpus_per_node=1"]),
    "standalone_sync": (
        "verl.trainer.main_ppo",
        ["actor_rollout_ref.hybrid_engine=False", "trainer.n_gpus_per_node=1", "rollout.n_gpus_per_node=1"],
    ),
    "one_step": ("recipe.one_step_off_policy.main_ppo", []),  # its demo: one trainer and one rollout process
}
STEP_FIELDS = {
    "gen_s": "timing_s/gen",
    "update_s": "timing_s/train",
    "overlap_s": "timing_s/overlap",
    "wait_prev_gen_s": "timing_s/wait_prev_gen",
    "step_s": "timing_s/step",
    "sync_s": "timing_s/sync_rollout_weights",
    "sync_bytes": "checkpoint_engine/bytes",
    "sync_engine_s": "checkpoint_engine/seconds",
    "sync_version": "checkpoint_engine/version",
    "staleness_max": "training/weight_version_staleness/max",
}


def _history(run_dir: str) -> list[dict]:
    with open(os.path.join(run_dir, "metrics.jsonl")) as f:
        records = [json.loads(line) for line in f if line.strip()]
    return [{"step": r["step"], "kind": r.get("kind"), **r.get("metrics", {})} for r in records]


def _emit(**fields) -> None:
    print(json.dumps(fields), flush=True)


def run_mode(mode: str, steps: int, work_dir: str, extra: list[str], timeout: int) -> dict:
    """Run one mode (``extra``: Hydra overrides of this run); its per-step records and summary."""
    module, overrides = MODES[mode]
    folder = os.path.join(work_dir, mode)
    os.makedirs(folder, exist_ok=True)
    overrides = overrides + [
        f"trainer.total_training_steps={steps}",
        f"trainer.test_freq={steps}",
        "trainer.val_before_train=True",
        "trainer.save_freq=-1",
        *extra,
    ]
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(filter(None, [REPO, os.environ.get("PYTHONPATH")])))
    start = time.time()
    with open(os.path.join(folder, "stdout.log"), "w") as out, open(os.path.join(folder, "stderr.log"), "w") as err:
        proc = subprocess.run(
            [sys.executable, "-m", module, *overrides], cwd=folder, env=env, stdout=out, stderr=err, timeout=timeout
        )
    wall = time.time() - start
    if proc.returncode != 0:
        raise SystemExit(f"{mode} failed (rc={proc.returncode}); see {folder}/stderr.log")
    history = _history(os.path.join(folder, RUN_DIR))
    per_step = [r for r in history if "timing_s/step" in r]
    vals = [r for r in history if VAL_KEY in r]
    for record in per_step:
        _emit(mode=mode, step=record["step"], **{k: record.get(v) for k, v in STEP_FIELDS.items()})
    later = [r for r in per_step if r["step"] >= 2] or per_step
    mean = lambda key: sum(r.get(key, 0.0) for r in later) / len(later)  # noqa: E731
    summary = {
        "mode": mode,
        "wall_s": round(wall, 1),
        "steps": len(per_step),
        "mean_step_s": round(mean("timing_s/step"), 3),
        "mean_gen_s": round(mean("timing_s/gen"), 3),
        "mean_update_s": round(mean("timing_s/train"), 3),
        "mean_overlap_s": round(mean("timing_s/overlap"), 3),
        "mean_sync_s": round(mean("timing_s/sync_rollout_weights"), 4),
        "mean_wait_prev_gen_s": round(mean("timing_s/wait_prev_gen"), 3),
        "sync_bytes": max((r.get("checkpoint_engine/bytes", 0) for r in per_step), default=0),
        "val_before": vals[0][VAL_KEY] if vals else None,
        "val_final": vals[-1][VAL_KEY] if vals else None,
    }
    _emit(**summary)
    return summary


def draw_timeline(results: dict, path: str) -> None:
    """One step of each mode to scale, from the modes' mean figures (steps 2..N): a row per pool."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    colors = {"generate": "#4c9be8", "train": "#f39c4a", "sync": "#6c6c6c", "wait": "#d9d9d9"}
    rows = []  # (label, [(phase, start, length)])
    for mode, r in results.items():
        gen, upd, sync = r["mean_gen_s"], r["mean_update_s"], r["mean_sync_s"]
        if mode == "hybrid_sync":
            rows.append(("hybrid: actor+rollout", [("generate", 0, gen), ("train", gen, upd)]))
        elif mode == "standalone_sync":
            rows.append(("standalone sync: rollout", [("sync", 0, sync), ("generate", sync, gen)]))
            rows.append(("standalone sync: trainer", [("sync", 0, sync), ("train", sync + gen, upd)]))
        elif mode == "one_step":
            wait = r["mean_wait_prev_gen_s"]
            rows.append(("one-step: rollout (batch k+1)", [("sync", wait, sync), ("generate", wait + sync, gen)]))
            rows.append(
                ("one-step: trainer (batch k)", [("wait", 0, wait), ("sync", wait, sync), ("train", wait + sync, upd)])
            )
    fig, ax = plt.subplots(figsize=(10, 0.6 * len(rows) + 1.2))
    for y, (_, phases) in enumerate(reversed(rows)):
        for phase, start, length in phases:
            ax.barh(y, length, left=start, color=colors[phase], edgecolor="black", height=0.6)
    ax.set_yticks(range(len(rows)), [label for label, _ in reversed(rows)])
    ax.set_xlabel("seconds within one step (means of steps 2..N)")
    handles = [plt.Rectangle((0, 0), 1, 1, color=c) for c in colors.values()]
    ax.legend(handles, list(colors), loc="lower right", bbox_to_anchor=(1.0, 1.0), ncol=4, fontsize=8, frameon=False)
    fig.tight_layout()
    fig.savefig(path, dpi=110)


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=20)
    parser.add_argument("--modes", default=",".join(MODES))
    parser.add_argument("--work_dir", default=None)
    parser.add_argument("--timeout", type=int, default=3600)
    parser.add_argument("--timeline_out", default=None, help="draw one step of each mode (PNG) here")
    parser.add_argument(
        "--one_step_overrides",
        default="",
        help="space-separated overrides for the one-step run only, e.g. its rollout correction: "
        "'algorithm.rollout_correction.bypass_mode=True actor_rollout_ref.rollout.calculate_log_probs=True'",
    )
    parser.add_argument("--from_json", default=None, help="draw from a previous run's output instead of running")
    args, extra = parser.parse_known_args(argv)
    if args.from_json:  # the summary lines of an earlier run (e.g. its saved stdout)
        with open(args.from_json) as f:
            lines = [json.loads(line) for line in f if line.strip().startswith("{")]
        results = {r["mode"]: r for r in lines if "wall_s" in r}
        for mode, summary in results.items():  # older outputs lack the mean wait: from the per-step lines
            waits = [r["wait_prev_gen_s"] or 0.0 for r in lines if r.get("mode") == mode and r.get("step", 0) >= 2]
            summary.setdefault("mean_wait_prev_gen_s", sum(waits) / len(waits) if waits else 0.0)
        draw_timeline(results, args.timeline_out)
        return 0
    work_dir = args.work_dir or tempfile.mkdtemp(prefix="verl_one_step_bench_")
    results = {}
    for mode in args.modes.split(","):
        mode_extra = extra + (args.one_step_overrides.split() if mode == "one_step" else [])
        results[mode] = run_mode(mode, args.steps, work_dir, mode_extra, args.timeout)
    if args.timeline_out:
        draw_timeline(results, args.timeline_out)
    one_step = results.get("one_step")
    for baseline in ("hybrid_sync", "standalone_sync"):
        if one_step and baseline in results:
            base = results[baseline]
            _emit(
                figure=f"one_step_vs_{baseline}",
                step_time_ratio=round(one_step["mean_step_s"] / base["mean_step_s"], 3),
                wall_time_ratio=round(one_step["wall_s"] / base["wall_s"], 3),
                val_final_diff=round(one_step["val_final"] - base["val_final"], 4),
            )
    _emit(work_dir=work_dir)
    return 0


if __name__ == "__main__":
    sys.exit(main())
