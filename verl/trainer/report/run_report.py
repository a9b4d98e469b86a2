"""A run at a glance: a progress bar with ETA, `metrics.jsonl`, a learning-curve PNG and a Markdown report.

`RunReporter(output_dir, total_steps)` is fed by the trainer (`on_step`, `on_validation`) and writes, in
`output_dir`: `metrics.jsonl` (one line per train step / validation, appended as the run goes so a
resumed run rebuilds its curves), and on `finish()` `learning_curve.png` (needs matplotlib, the `plot`
extra; skipped with one warning when it is missing) and `report.md`.
"""

from __future__ import annotations

import datetime
import json
import logging
import math
import numbers
import os
import sys
import time
from collections.abc import Iterable
from typing import IO, Any

from tqdm import tqdm

logger = logging.getLogger(__name__)

__all__ = ["RunReporter", "write_learning_curve", "write_report", "load_history", "CURVE_PANELS"]

METRICS_FILE = "metrics.jsonl"
CURVE_FILE = "learning_curve.png"
REPORT_FILE = "report.md"

# (panel title, metric keys plotted in it); a key ending in "/" means every key with that prefix.
CURVE_PANELS: tuple[tuple[str, tuple[str, ...]], ...] = (
    ("reward", ("critic/score/mean", "critic/rewards/mean")),
    ("validation score", ("val-core/",)),
    # the KL the run optimises: the actor's KL loss or the in-reward penalty (ppo_kl, old vs current policy, is zero
    # for an on-policy step and says nothing about drift from the reference)
    ("KL to reference", ("actor/kl_loss", "actor/reward_kl_penalty")),
    ("entropy", ("actor/entropy",)),
    ("response length (tokens)", ("response_length/mean",)),
    ("step time (s)", ("timing_s/step",)),
)
_HEADLINE_KEYS = (
    "critic/score/mean",
    "critic/rewards/mean",
    "actor/ppo_kl",
    "actor/kl_loss",
    "actor/reward_kl_penalty",
    "actor/entropy",
    "actor/pg_loss",
    "critic/vf_loss",
    "response_length/mean",
    "timing_s/step",
    "perf/throughput",
)

_warned_no_matplotlib = False


def _number(value: Any) -> float | None:
    """A finite-or-nan float for a scalar metric value (0-d tensors and numpy scalars included), else None."""
    if isinstance(value, numbers.Number) and not isinstance(value, complex):
        return float(value)
    if hasattr(value, "item") and getattr(value, "ndim", None) == 0:
        return float(value.item())
    return None


def _scalar_metrics(metrics: dict) -> dict[str, float]:
    out = {}
    for key, value in metrics.items():
        number = _number(value)
        if number is not None:
            out[str(key)] = number
    return out


def _entries(history: Iterable[dict]) -> list[tuple[int, dict]]:
    """(step, metrics) pairs from reporter records `{"step", "kind", "metrics"}` or flat `{"step", **metrics}`."""
    out = []
    for record in history:
        metrics = record["metrics"] if "metrics" in record else {k: v for k, v in record.items() if k != "step"}
        out.append((int(record["step"]), _scalar_metrics(metrics)))
    return out


def _series(entries: list[tuple[int, dict]], key: str) -> tuple[list[int], list[float]]:
    points = {}
    for step, metrics in entries:
        value = metrics.get(key)
        if value is not None and math.isfinite(value):
            points[step] = value  # a later record of the same step wins
    steps = sorted(points)
    return steps, [points[s] for s in steps]


def _panel_keys(entries: list[tuple[int, dict]], patterns: tuple[str, ...]) -> list[str]:
    present: dict[str, None] = {}
    for _, metrics in entries:
        for key in metrics:
            if any(key.startswith(p) if p.endswith("/") else key == p for p in patterns):
                present[key] = None
    # fixed keys in the panel's order, prefix matches sorted by name
    fixed = [p for p in patterns if p in present]
    matched = sorted(k for k in present if k not in fixed)
    return fixed + matched


def _figure_class():
    """matplotlib's Figure, or None (with one warning per process) when matplotlib is missing."""
    global _warned_no_matplotlib
    try:
        # A bare Figure renders with Agg and leaves pyplot's global backend alone (no display needed).
        from matplotlib.figure import Figure
    except ImportError:
        if not _warned_no_matplotlib:
            logger.warning("matplotlib is not installed: no learning-curve PNG (`pip install matplotlib`)")
            _warned_no_matplotlib = True
        return None
    return Figure


def write_learning_curve(history: Iterable[dict], path: str, title: str | None = None) -> bool:
    """Draw the reward / validation / KL / entropy / length / step-time panels of `history` to a PNG at `path`.

    `history`: records `{"step": int, "metrics": {...}}` (as RunReporter keeps them) or flat `{"step": int, ...}`.
    Returns False (and writes nothing) when matplotlib is not installed.
    """
    figure_cls = _figure_class()
    if figure_cls is None:
        return False
    entries = _entries(history)
    fig = figure_cls(figsize=(15, 8), dpi=100)
    axes = fig.subplots(2, 3)
    for ax, (panel, patterns) in zip(axes.flat, CURVE_PANELS):
        ax.set_title(panel)
        ax.set_xlabel("step")
        ax.grid(True, alpha=0.3)
        keys = _panel_keys(entries, patterns)
        drawn = 0
        for key in keys:
            steps, values = _series(entries, key)
            if not steps:
                continue
            # validation runs are sparse: show each point
            marker = "o" if key.startswith("val-") or len(steps) < 20 else None
            label = key[len("val-core/") :] if key.startswith("val-core/") else key
            ax.plot(steps, values, marker=marker, markersize=3, label=label)
            drawn += 1
        if drawn:
            ax.legend(fontsize=7, loc="best")
        else:
            ax.text(0.5, 0.5, "no data", ha="center", va="center", transform=ax.transAxes, color="gray")
    if title:
        fig.suptitle(title)
    fig.tight_layout()
    os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
    fig.savefig(path)
    return True


def _fmt(value: float) -> str:
    return f"{value:.4g}" if math.isfinite(value) else str(value)


def write_report(
    history: Iterable[dict],
    path: str,
    run_name: str,
    total_steps: int | None = None,
    curve_file: str | None = CURVE_FILE,
    wall_time_s: float | None = None,
) -> str:
    """Write the Markdown run report (steps, start/end/best validation scores, final metrics) to `path`."""
    records = list(history)
    train = _entries(r for r in records if r.get("kind", "train") == "train")
    val = _entries(r for r in records if r.get("kind") == "val")
    last_step = max((s for s, _ in train + val), default=0)
    lines = [f"# Run report: {run_name}", ""]
    steps_line = f"- Training steps: {last_step}" + (f" / {total_steps}" if total_steps else "")
    lines.append(steps_line)
    if wall_time_s is not None:
        lines.append(f"- Wall time: {datetime.timedelta(seconds=round(wall_time_s))}")
    lines.append(f"- Finished: {datetime.datetime.now().strftime('%Y-%m-%d %H:%M:%S')}")
    lines.append("")

    val_keys = _panel_keys(val, ("val-core/",))
    if val_keys:
        lines += ["## Validation", "", "| metric | start | end | best |", "|---|---|---|---|"]
        for key in val_keys:
            steps, values = _series(val, key)
            if not steps:
                continue
            best = max(range(len(values)), key=lambda i: values[i])
            lines.append(
                f"| `{key}` | {_fmt(values[0])} (step {steps[0]}) | {_fmt(values[-1])} (step {steps[-1]}) "
                f"| {_fmt(values[best])} (step {steps[best]}) |"
            )
        lines.append("")
    else:
        lines += ["## Validation", "", "No validation scores were recorded.", ""]

    if curve_file:
        lines += ["## Learning curves", "", f"![learning curves]({curve_file})", ""]

    lines += step_time_table(train)
    if train:
        final_step, final = max(train, key=lambda e: e[0])
        headline = [k for k in _HEADLINE_KEYS if k in final]
        lines += [f"## Final metrics (step {final_step})", "", "| metric | value |", "|---|---|"]
        lines += [f"| `{k}` | {_fmt(final[k])} |" for k in headline]
        lines += ["", "<details><summary>All metrics of the last step</summary>", "", "| metric | value |", "|---|---|"]
        lines += [f"| `{k}` | {_fmt(v)} |" for k, v in sorted(final.items())]
        lines += ["", "</details>", ""]
    text = "\n".join(lines)
    os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
    with open(path, "w", encoding="utf-8") as f:
        f.write(text)
    return text


# the phases RayPPOTrainer times at the top level of a step, in order
STEP_PHASES = (
    "gen",
    "gen_max",
    "reward",
    "old_log_prob",
    "ref",
    "values",
    "adv",
    "update_critic",
    "update_actor",
    "dump_rollout_generations",
    "testing",
    "save_checkpoint",
)


def step_time_table(train: list[tuple[int, dict]]) -> list[str]:
    """Markdown lines: where the median step's time went (phases and their share), tokens per second and each
    role's peak resident memory. The first step is left out when there are more (it includes warm-up)."""
    steps = [m for _, m in sorted(train, key=lambda e: e[0]) if "timing_s/step" in m]
    if len(steps) > 1:
        steps = steps[1:]
    if not steps:
        return []

    def median(key: str) -> float | None:
        values = sorted(m[key] for m in steps if key in m)
        return values[len(values) // 2] if values else None

    def at_median(key: str) -> dict:
        """The step whose ``key`` is the median: a row's other figures come from that same step."""
        having = sorted((m for m in steps if key in m), key=lambda m: m[key])
        return having[len(having) // 2] if having else {}

    step = median("timing_s/step")
    # the trainer's top-level phases only: nested timers (a worker's own seconds, the weight hand-off inside gen)
    # would be counted twice
    phases = [f"timing_s/{name}" for name in STEP_PHASES if any(f"timing_s/{name}" in m for m in steps)]
    lines = [f"## Where the step time went (median of {len(steps)} steps)", ""]
    lines += ["| phase | seconds | share | achieved TFLOP/s | MFU |", "|---|---|---|---|---|"]
    accounted = 0.0
    for key in phases:
        seconds = median(key)
        if seconds is None or seconds < 1e-4:
            continue
        accounted += seconds
        name = key.removeprefix("timing_s/")
        same_step = at_median(key)
        achieved, mfu = same_step.get(f"perf/achieved_tflops/{name}"), same_step.get(f"perf/mfu/{name}")
        compute = f"{achieved:.4g} | {mfu:.1%}" if achieved is not None and mfu is not None else " | "
        lines.append(f"| {name} | {seconds:.3f} | {seconds / step:.1%} | {compute} |")
    other = step - accounted
    if other > 0:
        lines.append(f"| other (controller, transfers) | {other:.3f} | {other / step:.1%} | | |")
    lines.append(f"| **step** | **{step:.3f}** | 100% | | |")
    lines.append("")
    peak = median("perf/peak_tflops")
    if peak:
        lines.append(
            f"- MFU is achieved FLOP/s over a peak of {peak:.4g} TFLOP/s: on GPUs the datasheet dense bf16 figure "
            "per GPU, on CPU this host's GEMM peak in the compute dtype on all its cores, measured once and cached "
            "(verl.utils.peak_flops). FLOPs count the tokens each sequence really has."
        )
    tokens = median("perf/total_num_tokens")
    if tokens:
        lines.append(f"- Tokens per second (prompt + response, whole job): {tokens / step:.1f}")
    gen_ms = median("timing_per_token_ms/gen")
    if gen_ms:
        lines.append(f"- Generated tokens per second during generation: {1000 / gen_ms:.1f}")
    memory = sorted(k for k in steps[-1] if k.startswith("perf/peak_rss_gb/"))
    for key in memory:
        lines.append(f"- Peak resident memory, {key.removeprefix('perf/peak_rss_gb/')}: {steps[-1][key]:.2f} GB")
    lines.append("")
    return lines


def load_history(path: str, up_to_step: int | None = None) -> list[dict]:
    """Records of a `metrics.jsonl`, the last one of each (kind, step) kept; with `up_to_step`, later steps dropped."""
    latest: dict[tuple[str, int], dict] = {}
    with open(path, encoding="utf-8") as f:
        for line in f:
            if not line.strip():
                continue
            try:
                record = json.loads(line)
            except json.JSONDecodeError:  # a line cut short by a crash
                logger.warning("%s: skipping an unreadable line", path)
                continue
            key = (record.get("kind", "train"), int(record["step"]))
            latest.pop(key, None)
            latest[key] = record
    records = list(latest.values())
    if up_to_step is not None:
        records = [r for r in records if r["step"] <= up_to_step]
    return sorted(records, key=lambda r: (r["step"], r.get("kind") != "val"))


class RunReporter:
    """Progress bar with ETA, `metrics.jsonl`, learning-curve PNG and `report.md` for one training run.

    `initial_step`: steps already done (a resumed run); history in an existing `metrics.jsonl` up to it is kept.
    With `enabled=False` every method does nothing.
    """

    def __init__(
        self,
        output_dir: str,
        total_steps: int,
        enabled: bool = True,
        initial_step: int = 0,
        run_name: str | None = None,
        show_progress: bool = True,
        progress_file: IO[str] | None = None,
    ):
        self.output_dir = output_dir
        self.total_steps = total_steps
        self.enabled = enabled
        self.run_name = run_name or os.path.basename(os.path.normpath(output_dir))
        self.history: list[dict] = []
        self._bar = None
        self._finished = False
        self._start = time.time()
        self._postfix: dict[str, str] = {}
        if not enabled:
            return
        os.makedirs(output_dir, exist_ok=True)
        self.metrics_path = os.path.join(output_dir, METRICS_FILE)
        if os.path.exists(self.metrics_path):
            # Steps after the checkpoint we resume from will run again: drop them, rewrite the file compacted.
            self.history = load_history(self.metrics_path, up_to_step=initial_step)
            tmp = self.metrics_path + ".tmp"
            with open(tmp, "w", encoding="utf-8") as f:
                f.writelines(json.dumps(r) + "\n" for r in self.history)
            os.replace(tmp, self.metrics_path)
        if show_progress:
            self._bar = tqdm(
                total=total_steps,
                initial=initial_step,
                desc="Training Progress",
                position=0,
                leave=True,
                file=progress_file if progress_file is not None else sys.stderr,
                dynamic_ncols=True,
                bar_format="{desc}: {percentage:3.0f}%|{bar}| {n_fmt}/{total_fmt} "
                "[elapsed {elapsed}, ETA {remaining}, {rate_fmt}]{postfix}",
            )

    def _append(self, kind: str, step: int, metrics: dict) -> dict:
        record = {"kind": kind, "step": int(step), "time": time.time(), "metrics": _scalar_metrics(metrics)}
        # a repeated (kind, step) replaces the earlier record, as load_history does
        self.history = [r for r in self.history if (r.get("kind"), r["step"]) != (kind, record["step"])]
        self.history.append(record)
        with open(self.metrics_path, "a", encoding="utf-8") as f:
            f.write(json.dumps(record) + "\n")
        return record

    def on_step(self, step: int, metrics: dict) -> None:
        """Record the metrics of training step `step` and advance the progress bar by one."""
        if not self.enabled:
            return
        record = self._append("train", step, metrics)
        if self._bar is not None:
            for key in ("critic/score/mean", "critic/rewards/mean"):
                if key in record["metrics"]:
                    self._postfix["score"] = _fmt(record["metrics"][key])
                    break
            self._bar.set_postfix(self._postfix, refresh=False)
            self._bar.update(1)

    def on_validation(self, step: int, metrics: dict) -> None:
        """Record validation metrics (`val-core/...`, `val-aux/...`) computed at `step`."""
        if not self.enabled:
            return
        record = self._append("val", step, metrics)
        core = _panel_keys([(step, record["metrics"])], ("val-core/",))
        if core and self._bar is not None:
            self._postfix["val"] = _fmt(record["metrics"][core[0]])
            self._bar.set_postfix(self._postfix)

    def write(self, message: str) -> None:
        """Print a line above the progress bar without breaking it."""
        tqdm.write(message)

    def finish(self) -> dict[str, str]:
        """Close the bar, write `learning_curve.png` (when matplotlib is there) and `report.md`; return their paths."""
        if not self.enabled or self._finished:
            return {}
        self._finished = True
        if self._bar is not None:
            self._bar.close()
        paths = {"metrics": self.metrics_path}
        curve_path = os.path.join(self.output_dir, CURVE_FILE)
        title = f"{self.run_name}"
        have_curve = write_learning_curve(self.history, curve_path, title=title)
        if have_curve:
            paths["curve"] = curve_path
        report_path = os.path.join(self.output_dir, REPORT_FILE)
        table = step_time_table(_entries(r for r in self.history if r.get("kind", "train") == "train"))
        if table:
            print("\n".join(table), flush=True)
        write_report(
            self.history,
            report_path,
            run_name=self.run_name,
            total_steps=self.total_steps,
            curve_file=CURVE_FILE if have_curve else None,
            wall_time_s=time.time() - self._start,
        )
        paths["report"] = report_path
        logger.info("run report written to %s", report_path)
        return paths
