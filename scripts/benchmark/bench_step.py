"""Phase times of GRPO steps on two Ray CPU workers, and the controller's overhead.

overhead = step time - the workers' own compute time (seconds measured inside the worker methods:
generate_sequences, compute_log_prob, compute_ref_log_prob, update_actor). Everything else in a step — dispatch,
serialisation, Ray calls, the driver's reward and advantage computation, metrics — counts as overhead.
Prints one JSON line per figure (medians over the measured steps; the first step is warm-up).
Usage: python scripts/benchmark/bench_step.py [--steps 5] [--hidden 128] [--batch 16] [--n 4] [--response 32]
"""

import argparse
import json
import os
import statistics
import sys
import tempfile

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", ".."))

from tests.trainer.ppo_e2e_utils import compose_config, make_gsm8k_like_parquet, write_reward_fn  # noqa: E402
from verl.demo.tiny_model import make_tiny_model_dir  # noqa: E402
from verl.trainer.main_ppo import build_trainer, prepare_config, ray_init_kwargs  # noqa: E402
from verl.trainer.ppo.ray_trainer import RayPPOTrainer  # noqa: E402

PHASES = ["gen", "old_log_prob", "ref", "adv", "update_actor", "reward"]
WORKER_COMPUTE = ["generate_sequences", "worker/compute_log_prob", "worker/compute_ref_log_prob", "worker/update_actor"]


class TimedTrainer(RayPPOTrainer):
    """Keeps each step's timing_raw."""

    def train_step(self, batch, timing_raw):
        self.step_timings.append(timing_raw)
        batch, self.last_metrics = super().train_step(batch, timing_raw)
        return batch, self.last_metrics

    def _step_metrics(self, batch, timing_raw):
        step_metrics = super()._step_metrics(batch, timing_raw)
        self.last_metrics.update(step_metrics)
        return step_metrics


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--steps", type=int, default=5)
    parser.add_argument("--hidden", type=int, default=128)
    parser.add_argument("--layers", type=int, default=2)
    parser.add_argument("--batch", type=int, default=16)
    parser.add_argument("--n", type=int, default=4)
    parser.add_argument("--response", type=int, default=32)
    args = parser.parse_args()

    import ray

    root = tempfile.mkdtemp(prefix="bench_step_")
    model = make_tiny_model_dir(
        os.path.join(root, "model"),
        hidden_size=args.hidden,
        num_layers=args.layers,
        num_heads=4,
        num_kv_heads=2,
        intermediate_size=4 * args.hidden,
    )
    train = make_gsm8k_like_parquet(os.path.join(root, "train.parquet"), args.batch * (args.steps + 1))
    val = make_gsm8k_like_parquet(os.path.join(root, "val.parquet"), 4)
    overrides = [
        "algorithm.adv_estimator=grpo",
        f"data.train_files={train}",
        f"data.val_files={val}",
        f"data.train_batch_size={args.batch}",
        "data.max_prompt_length=32",
        f"data.max_response_length={args.response}",
        f"actor_rollout_ref.model.path={model}",
        f"actor_rollout_ref.actor.ppo_mini_batch_size={args.batch}",
        "actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu=8",
        "actor_rollout_ref.actor.use_kl_loss=True",
        "actor_rollout_ref.model.enable_gradient_checkpointing=False",
        "actor_rollout_ref.rollout.name=hf",
        f"actor_rollout_ref.rollout.n={args.n}",
        "actor_rollout_ref.rollout.log_prob_micro_batch_size_per_gpu=16",
        "actor_rollout_ref.ref.log_prob_micro_batch_size_per_gpu=16",
        f"custom_reward_function.path={write_reward_fn(root)}",
        "trainer.logger=['console']",
        "trainer.n_gpus_per_node=2",
        "trainer.device=cpu",
        f"trainer.total_training_steps={args.steps}",
        "trainer.val_before_train=False",
        "trainer.resume_mode=disable",
        "trainer.run_report=False",
        f"trainer.default_local_dir={root}/ckpt",
        "ray_init.num_cpus=4",
    ]
    config = compose_config(overrides)
    prepare_config(config)
    ray.init(**ray_init_kwargs(config), log_to_driver=False)
    trainer = build_trainer(config)
    trainer.__class__ = TimedTrainer
    trainer.step_timings = []
    trainer.init_workers()
    sys.stdout = open(os.devnull, "w")  # the console logger's lines; figures go to stderr's twin below
    trainer.fit()
    sys.stdout = sys.__stdout__

    measured = trainer.step_timings[1:]

    def median(key):
        return statistics.median(t.get(key, 0.0) for t in measured)

    for phase in PHASES + ["step"]:
        print(json.dumps({"figure": f"phase_{phase}_s", "value": round(median(phase), 4)}))
    step = median("step")
    compute = statistics.median(sum(t.get(k, 0.0) for k in WORKER_COMPUTE) for t in measured)
    overhead = step - compute
    print(json.dumps({"figure": "workers_compute_s", "value": round(compute, 4)}))
    print(json.dumps({"figure": "controller_overhead_s", "value": round(overhead, 4)}))
    print(json.dumps({"figure": "controller_overhead_fraction", "value": round(overhead / step, 4), "target": 0.10}))
    for key, value in sorted(trainer.last_metrics.items()):
        if key.startswith("perf/peak_rss_gb/"):
            print(json.dumps({"figure": f"peak_rss_gb_{key.rsplit('/', 1)[-1]}", "value": round(value, 3)}))
    ray.shutdown()


if __name__ == "__main__":
    main()
