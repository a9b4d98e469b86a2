"""Step time with the reward loop (``reward_model.use_reward_loop=True``: each generated chunk scored as it
finishes) against batch rewards (scored after generation), on the same run with a slow rule.

The run: the built-in demo task and model, in-process worker group, GRPO; the reward is the built-in rule behind a
custom reward function that sleeps ``--sleep-ms`` per sample (a slow verifier). Both arms generate in the same chunks
(``rollout.micro_batch_size``), so generation costs the same; a KL loss adds GRPO's usual reference pass. Per arm
(medians over the steps after each run's first; the arms run alternately, ``--repeats`` times each):
``step_s``, ``gen_s``, ``reward_phase_s`` (seconds the step spent waiting for rewards: the reward phase on the batch
path; on the loop, the reward phase plus the wait where the rewards are read), ``scoring_s`` (seconds the scorer ran)
and ``overlap_s`` (those of them spent while the trainer was generating or in later phases). Prints one JSON line per
figure, then the step-time ratio loop / batch and the seconds saved.
With ``--extra`` overrides (e.g. ``actor_rollout_ref.rollout.name=vllm``, or ``rollout.mode=async``) the loop
scores each trajectory as it finishes instead of each chunk; ``scored_during_generation`` then counts the rows
whose scoring started before generation returned.
Usage: python scripts/benchmark/bench_reward_loop.py [--steps 4] [--batch 8] [--n 8] [--chunk 2] [--sleep-ms 50]
    [--repeats 2] [--extra KEY=VALUE ...] [--subprocess]
"""

import argparse
import json
import os
import statistics
import sys
import tempfile

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", ".."))

from tests.trainer.ppo_e2e_utils import demo_run_overrides, fit_demo_inprocess  # noqa: E402
from verl.trainer.ppo.ray_trainer import RayPPOTrainer  # noqa: E402

SLOW_RULE = """
import time

from verl.utils.reward_score import default_compute_score


def compute_score(data_source, solution_str, ground_truth, extra_info=None, sleep_s=0.05):
    time.sleep(sleep_s)  # a slow verifier
    return default_compute_score(data_source, solution_str, ground_truth, extra_info)
"""


class RecordingTrainer(RayPPOTrainer):
    """Keeps each step's metrics (timings included)."""

    def _step_metrics(self, batch, timing_raw):
        metrics = super()._step_metrics(batch, timing_raw)
        self.recorded.append({**self.last_metrics, **metrics})
        return metrics

    def train_step(self, batch, timing_raw):
        batch, self.last_metrics = super().train_step(batch, timing_raw)
        return batch, self.last_metrics


def run_arm(root: str, reward_loop: bool, args) -> list[dict]:
    rule = os.path.join(root, "slow_rule.py")
    with open(rule, "w") as f:
        f.write(SLOW_RULE)
    local_dir = os.path.join(root, f"ckpt_{reward_loop}")
    overrides = demo_run_overrides(local_dir, args.steps) + [
        f"data.train_batch_size={args.batch}",
        f"actor_rollout_ref.rollout.n={args.n}",
        f"actor_rollout_ref.rollout.micro_batch_size={args.chunk}",
        f"actor_rollout_ref.actor.ppo_mini_batch_size={args.batch}",
        "actor_rollout_ref.actor.use_kl_loss=True",  # GRPO's usual KL loss: a reference pass after generation
        f"custom_reward_function.path={rule}",
        f"+custom_reward_function.reward_kwargs.sleep_s={args.sleep_ms / 1000.0}",
        f"reward_model.use_reward_loop={reward_loop}",
        *args.extra,
    ]
    RecordingTrainer.recorded = []
    return fit_demo_inprocess(overrides, RecordingTrainer).recorded


def figures(steps: list[dict]) -> dict:
    def median(fn):
        return statistics.median(fn(m) for m in steps)

    return {
        "step_s": median(lambda m: m["timing_s/step"]),
        "gen_s": median(lambda m: m["timing_s/gen"]),
        "reward_phase_s": median(lambda m: m["timing_s/reward"] + m.get("reward_loop/wait_s", 0.0)),
        "scoring_s": median(lambda m: m.get("reward_loop/scoring_s", m["timing_s/reward"])),
        "overlap_s": median(lambda m: m.get("reward_loop/overlap_s", 0.0)),
        "scored_during_generation": median(lambda m: m.get("reward_loop/scored_during_generation", 0.0)),
        "score_mean": median(lambda m: m["critic/score/mean"]),
    }


def run_in_subprocess(arm: str) -> list[dict]:
    """One run of ``arm`` in a fresh process (vLLM keeps process-wide state that a second engine trips over)."""
    import subprocess

    argv = [a for a in sys.argv[1:] if a != "--subprocess"]
    out = subprocess.run([sys.executable, __file__, *argv, "--arm", arm], capture_output=True, text=True, check=True)
    return json.loads(out.stdout.strip().splitlines()[-1])


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--steps", type=int, default=4)
    parser.add_argument("--batch", type=int, default=8)
    parser.add_argument("--n", type=int, default=8)
    parser.add_argument("--chunk", type=int, default=2, help="rollout.micro_batch_size: prompts per generated chunk")
    parser.add_argument("--sleep-ms", type=float, default=50.0)
    parser.add_argument("--repeats", type=int, default=2, help="runs of each arm, alternated (the box is shared)")
    parser.add_argument("--extra", nargs="*", default=[], help="more overrides for both arms (KEY=VALUE)")
    parser.add_argument("--subprocess", action="store_true", help="each run in a process of its own (vLLM)")
    parser.add_argument("--arm", choices=["batch", "reward_loop"], help=argparse.SUPPRESS)  # one run, for --subprocess
    args = parser.parse_args()

    root = tempfile.mkdtemp(prefix="bench_reward_loop_")
    if args.arm:
        recorded = run_arm(root, args.arm == "reward_loop", args)
        print(json.dumps([{k: v for k, v in m.items() if isinstance(v, int | float)} for m in recorded]))
        return
    steps = {"batch": [], "reward_loop": []}
    for _ in range(args.repeats):  # alternated, so a change in the machine's load hits both arms
        for arm, on in (("batch", False), ("reward_loop", True)):
            steps[arm] += (run_in_subprocess(arm) if args.subprocess else run_arm(root, on, args))[1:]  # 1st: warm-up
    results = {arm: figures(recorded) for arm, recorded in steps.items()}
    for arm, values in results.items():
        for name, value in values.items():
            print(json.dumps({"arm": arm, "figure": name, "value": round(value, 4)}))
    base, loop = results["batch"], results["reward_loop"]
    print(json.dumps({"figure": "step_ratio_loop_over_batch", "value": round(loop["step_s"] / base["step_s"], 4)}))
    print(json.dumps({"figure": "step_saved_s", "value": round(base["step_s"] - loop["step_s"], 4)}))
    print(
        json.dumps(
            {"figure": "reward_phase_saved_s", "value": round(base["reward_phase_s"] - loop["reward_phase_s"], 4)}
        )
    )


if __name__ == "__main__":
    main()
