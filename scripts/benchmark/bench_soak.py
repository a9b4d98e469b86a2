"""Soak: the built-in demo run for many steps, with every process's memory, file descriptors and threads sampled.

    python scripts/benchmark/bench_soak.py [--steps 300] [--save_freq 50] [--picture docs/images/soak_curve.png]

Runs ``python -m verl.trainer.main_ppo`` (no data, no model: the built-in demo) with ``total_training_steps`` and
``save_freq`` set. Every ``--interval`` seconds it reads, through psutil, the resident memory, open file descriptors
and thread count of the driver (which runs the controller on a local cluster) and of each Ray worker process
(``ray::`` in its title) under it; at each train step (a new record in the run's ``metrics.jsonl``) it records per
process the lowest and highest resident memory seen since the step before (the resting level, and the peak of the
phases the samples caught) and the descriptors and threads. Prints the curve, then one JSON line per figure, and
checks that from ``--from_step`` to the end the resting resident memory of each process grew by at most
``--max_growth`` (medians of the first and last ``--window`` steps), and its descriptors and threads by at most that
fraction or 2, whichever is larger. Exit status 1 when a check fails. Extra arguments go to main_ppo as overrides.
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

import psutil

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
RUN_DIR = os.path.join("checkpoints", "verl_examples", "arithmetic")


def _emit(name: str, value, unit: str = "") -> None:
    print(json.dumps({"figure": name, "value": value, "unit": unit}), flush=True)


def _train_steps(path: str) -> int:
    """The newest train step recorded in ``metrics.jsonl`` (0 before the first)."""
    step = 0
    try:
        with open(path) as f:
            for line in f:
                try:
                    record = json.loads(line)
                except ValueError:  # a line being written
                    continue
                if record.get("kind", "train") == "train":
                    step = max(step, int(record.get("step", 0)))
    except OSError:
        pass
    return step


def _label(proc: psutil.Process, driver_pid: int) -> str | None:
    """``driver`` or the Ray worker's title (``ray::WorkerDict.update_actor`` -> ``WorkerDict``); None: not sampled."""
    if proc.pid == driver_pid:
        return "driver"
    try:
        title = " ".join(proc.cmdline()) or proc.name()
    except (psutil.NoSuchProcess, psutil.AccessDenied):
        return None
    if not title.startswith("ray::") or title.startswith("ray::IDLE"):
        return None
    return title[len("ray::") :].split(".")[0].split()[0]


def _sample(driver: psutil.Process) -> dict[str, dict]:
    """``{"<label>:<pid>": {"rss_mib", "fds", "threads"}}`` of the driver and the Ray workers under it."""
    out = {}
    try:
        procs = [driver, *driver.children(recursive=True)]
    except psutil.NoSuchProcess:
        return out
    for proc in procs:
        label = _label(proc, driver.pid)
        if label is None:
            continue
        try:
            with proc.oneshot():
                out[f"{label}:{proc.pid}"] = {
                    "rss_mib": proc.memory_info().rss / 2**20,
                    "fds": proc.num_fds(),
                    "threads": proc.num_threads(),
                }
        except (psutil.NoSuchProcess, psutil.AccessDenied):
            continue
    return out


def _growth(series: list[tuple[int, float]], from_step: int, window: int) -> tuple[float, float]:
    """Median of the first ``window`` values at or after ``from_step`` and of the last ``window`` values."""
    values = [v for s, v in series if s >= from_step]
    return statistics.median(values[:window]), statistics.median(values[-window:])


def _slope(series: list[tuple[int, float]], from_step: int) -> float:
    """Least-squares slope (per step) of the values at or after ``from_step``."""
    points = [(s, v) for s, v in series if s >= from_step]
    mean_s = statistics.fmean(s for s, _ in points)
    mean_v = statistics.fmean(v for _, v in points)
    spread = sum((s - mean_s) ** 2 for s, _ in points)
    return sum((s - mean_s) * (v - mean_v) for s, v in points) / spread if spread else 0.0


def _picture(curves: dict[str, dict[str, list]], path: str, from_step: int) -> bool:
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        print("matplotlib is not installed (pip install -e .[bench]); no picture written", file=sys.stderr)
        return False
    fig, axes = plt.subplots(1, 3, figsize=(15, 4.2))
    for ax, (metric, title) in zip(
        axes,
        [
            ("rss_mib", "resident memory (MiB): lowest in the step, dashed: highest"),
            ("fds", "open file descriptors"),
            ("threads", "threads"),
        ],
    ):
        for index, (name, series) in enumerate(sorted(curves.items())):
            steps = [s for s, _ in series[metric]]
            color = f"C{index}"
            label = name.split(":")[0] + f" ({name.split(':')[1]})"
            ax.plot(steps, [v for _, v in series[metric]], color=color, label=label)
            if metric == "rss_mib":
                peaks = [v for _, v in series["peak_rss_mib"]]
                ax.plot(steps, peaks, color=color, linestyle="--", linewidth=0.6, alpha=0.6)
        ax.axvline(from_step, color="grey", linestyle=":", linewidth=1)
        ax.set_title(title)
        ax.set_xlabel("train step")
        ax.grid(alpha=0.3)
    axes[0].legend(fontsize=7)
    fig.suptitle("Soak: built-in demo run, every process after each step (dotted: end of warm-up)")
    fig.tight_layout()
    os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
    fig.savefig(path, dpi=90)
    plt.close(fig)
    return True


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=300)
    parser.add_argument("--save_freq", type=int, default=50)
    parser.add_argument("--test_freq", type=int, default=50)
    parser.add_argument("--from_step", type=int, default=20, help="end of warm-up: growth is measured from here")
    parser.add_argument("--max_growth", type=float, default=0.05)
    parser.add_argument("--window", type=int, default=5)
    parser.add_argument("--interval", type=float, default=0.25, help="seconds between samples within a step")
    parser.add_argument("--work_dir", default=None)
    parser.add_argument("--picture", default=None, help="write the curves here as a PNG")
    parser.add_argument("--curve_json", default=None, help="write the raw samples here")
    parser.add_argument("--timeout", type=int, default=7200)
    args, overrides = parser.parse_known_args(argv)
    work_dir = args.work_dir or tempfile.mkdtemp(prefix="verl_soak_")
    os.makedirs(work_dir, exist_ok=True)
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(filter(None, [REPO, os.environ.get("PYTHONPATH")])))
    command = [
        sys.executable,
        "-m",
        "verl.trainer.main_ppo",
        f"trainer.total_training_steps={args.steps}",
        f"trainer.save_freq={args.save_freq}",
        f"trainer.test_freq={args.test_freq}",
        *overrides,
    ]
    metrics_file = os.path.join(work_dir, RUN_DIR, "metrics.jsonl")
    curves: dict[str, dict[str, list]] = {}
    start = time.time()
    with open(os.path.join(work_dir, "stdout.log"), "w") as out, open(os.path.join(work_dir, "stderr.log"), "w") as err:
        proc = subprocess.Popen(command, cwd=work_dir, env=env, stdout=out, stderr=err)
        driver = psutil.Process(proc.pid)
        seen, window = 0, {}  # window: each process's lowest and highest resident memory since the last step
        while proc.poll() is None and time.time() - start < args.timeout:
            sample = _sample(driver)
            for name, values in sample.items():
                low, high = window.get(name, (values["rss_mib"], values["rss_mib"]))
                window[name] = (min(low, values["rss_mib"]), max(high, values["rss_mib"]))
            step = _train_steps(metrics_file)
            if step > seen:
                seen = step
                for name, values in sample.items():
                    series = curves.setdefault(name, {"rss_mib": [], "peak_rss_mib": [], "fds": [], "threads": []})
                    low, high = window.get(name, (values["rss_mib"], values["rss_mib"]))
                    series["rss_mib"].append((step, low))
                    series["peak_rss_mib"].append((step, high))
                    series["fds"].append((step, values["fds"]))
                    series["threads"].append((step, values["threads"]))
                window = {}
                row = "  ".join(
                    f"{n}={curves[n]['rss_mib'][-1][1]:.0f}-{curves[n]['peak_rss_mib'][-1][1]:.0f}MiB/{v['fds']}fd/"
                    f"{v['threads']}th"
                    for n, v in sorted(sample.items())
                )
                print(f"step {step:4d}  {row}", flush=True)
            time.sleep(args.interval)
        if proc.poll() is None:
            proc.kill()
        returncode = proc.wait()
    wall = time.time() - start
    _emit("soak_wall_time", round(wall, 1), "s")
    _emit("soak_steps", seen)
    if returncode != 0 or seen < args.steps:
        _emit("soak_exit_code", returncode)
        print(f"main_ppo stopped at step {seen}; see {work_dir}/stderr.log", file=sys.stderr)
        return 1
    if args.curve_json:
        with open(args.curve_json, "w") as f:
            json.dump(curves, f)
    failures = []
    # a process sampled from warm-up to the end (the driver and the long-lived workers)
    lasting = {n: c for n, c in curves.items() if c["rss_mib"][0][0] <= args.from_step and c["rss_mib"][-1][0] == seen}
    for name, series in sorted(lasting.items()):
        for metric in ("rss_mib", "peak_rss_mib", "fds", "threads"):
            first, last = _growth(series[metric], args.from_step, args.window)
            growth = (last - first) / first if first else 0.0
            _emit(f"{name}/{metric}", {"at_warmup": round(first, 1), "at_end": round(last, 1)}, "")
            _emit(f"{name}/{metric}_growth", round(100 * growth, 2), f"% from step {args.from_step} to {seen}")
            if metric.endswith("rss_mib"):  # the least-squares trend, less sensitive to single samples
                slope = _slope(series[metric], args.from_step) * 100
                _emit(f"{name}/{metric}_trend", round(slope, 2), "MiB/100 steps")
            if metric == "peak_rss_mib":  # reported: where a sample fell within a phase moves the peak
                continue
            allowed = args.max_growth * first if metric == "rss_mib" else max(2.0, args.max_growth * first)
            if last - first > allowed:
                failures.append(f"{name} {metric}: {first:.1f} -> {last:.1f}")
    _emit("soak_processes_sampled", sorted(lasting))
    if args.picture and _picture(curves, args.picture, args.from_step):
        _emit("soak_picture", args.picture)
    _emit("soak_flat", not failures, "; ".join(failures) or f"every process within {100 * args.max_growth:g}%")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
