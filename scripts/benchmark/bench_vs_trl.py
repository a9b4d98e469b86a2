"""GRPO step time against TRL's GRPOTrainer on the same work, in one run on this machine.

Both train the same randomly initialised model (``--size 25m``: Qwen2, hidden 512, 8 layers, ~25M parameters;
``--size 135m``: SmolLM2-135M's llama shape, vocabulary 49152, tied embeddings) on the same prompts (the shipped
arithmetic task, ChatML template), with the same prompts per step, group size, response length, KL coefficient and
learning rate. TRL runs in its own process with ``OMP_NUM_THREADS`` = the machine's cores (as a user would run it);
ours is ``python -m verl.trainer.main_ppo`` with verl's overrides on ``--workers`` Ray CPU workers.

Prints one JSON line per figure: each side's median step time (first step excluded as warm-up), our phases'
seconds, generated tokens per second, peak resident memory (total, and per role for ours), and the ratio TRL / ours
(above 1: we are faster). ``pip install -e .[bench]`` installs TRL.

    python scripts/benchmark/bench_vs_trl.py --size 25m --rollout vllm [--steps 4] [--prompts 8] [--n 4]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import threading
import time

SIZES = {
    "25m": {
        "model_type": "qwen2",
        "hidden_size": 512,
        "num_layers": 8,
        "num_heads": 8,
        "num_kv_heads": 4,
        "intermediate_size": 1536,
    },
    "135m": {
        "model_type": "llama",
        "hidden_size": 576,
        "num_layers": 30,
        "num_heads": 9,
        "num_kv_heads": 3,
        "intermediate_size": 1536,
        "vocab_size": 49152,
        "tie_word_embeddings": True,
    },
}
# ours in bf16: the actor computes in bf16 over fp32 master weights, the frozen reference is loaded in bf16
PRECISION_OVERRIDES = {
    "fp32": [],
    "bf16": [
        "+actor_rollout_ref.actor.fsdp_config.mixed_precision.param_dtype=bf16",
        "+actor_rollout_ref.ref.fsdp_config.model_dtype=bf16",
    ],
}
# Ray's own processes (GCS, raylet, dashboard head and agent, runtime-env agent, monitors): a fixed cost of any Ray
# run, reported apart. The agents run as Ray workers named ray::<Agent>.
RAY_SYSTEM_MARKERS = (
    "gcs_server",
    "raylet",
    "dashboard/dashboard.py",
    "ray::DashboardAgent",
    "ray::RuntimeEnvAgent",
    "log_monitor.py",
    "monitor.py",
)
PHASES = ("gen", "old_log_prob", "ref", "adv", "update_actor", "reward")


def emit(figure: str, value, **fields) -> None:
    print(json.dumps({"figure": figure, "value": value, **fields}), flush=True)


# ------------------------------------------------------------------------------------------------ memory
class TreeMemory:
    """Samples the resident memory of a process and all its descendants (Ray's workers included) every 0.2 s.

    Keeps the peak of the sum and each group's peak; a process is grouped by its command line (Ray names its
    worker processes ``ray::<Class>.<method>``). Summed RSS counts a page shared by several processes (the torch
    and vLLM libraries every worker maps, Ray's shared-memory object store) once per process, so the peak of the
    summed PSS (proportional set size: a shared page split between its sharers) is kept too: that is the memory
    the run takes from the host."""

    def __init__(self, pid: int, groups: dict[str, str]) -> None:
        self.pid, self.groups = pid, groups
        self.peak_total = 0
        self.peak_pss = 0
        self.peak_by_group: dict[str, int] = {}
        self.pss_by_group_at_peak: dict[str, int] = {}  # where the summed-PSS peak sits, group by group
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def __enter__(self):
        self._thread.start()
        return self

    def __exit__(self, *exc):
        self._stop.set()
        self._thread.join()

    def _group(self, proc) -> str:
        try:
            cmdline = " ".join(proc.cmdline())
        except Exception:  # noqa: BLE001 - the process may be gone
            return "other"
        for name, marker in self.groups.items():
            if marker in cmdline:
                return name
        if proc.pid == self.pid:
            return "driver"
        if "default_worker.py" in cmdline:  # a Ray worker before it takes its class name: not grouped yet
            return "other"
        if any(marker in cmdline for marker in RAY_SYSTEM_MARKERS):
            return "ray_system"
        return "other"

    def _run(self) -> None:
        import psutil

        try:
            root = psutil.Process(self.pid)
        except psutil.NoSuchProcess:
            return
        last_pss = 0.0
        groups: dict[int, str] = {}  # a pid keeps its group; Ray renames a worker's title per method, not its class
        while not self._stop.is_set():
            try:
                procs = [root, *root.children(recursive=True)]
            except psutil.NoSuchProcess:
                return
            total, by_group, rss_of = 0, {}, {}
            for proc in procs:
                try:
                    rss_of[proc.pid] = rss = proc.memory_info().rss
                except psutil.Error:
                    continue
                total += rss
                group = groups.get(proc.pid) or self._group(proc)
                if group != "other":  # a Ray worker starts as default_worker.py and takes its class name later
                    groups[proc.pid] = group
                by_group[group] = by_group.get(group, 0) + rss
            # PSS walks every mapping of every process (and holds their memory maps' locks meanwhile), which would
            # slow the measured run (~50 ms per worker): read it at most once a second, and only near the RSS
            # peak, where the PSS peak is too.
            if total >= 0.97 * self.peak_total and time.monotonic() - last_pss >= 1.0:
                pss_by_group: dict[str, int] = {}
                for pid, rss in rss_of.items():
                    group = groups.get(pid, "other")
                    pss_by_group[group] = pss_by_group.get(group, 0) + (_pss_bytes(pid) or rss)
                pss = sum(pss_by_group.values())
                if pss > self.peak_pss:
                    self.peak_pss, self.pss_by_group_at_peak = pss, pss_by_group
                last_pss = time.monotonic()
            self.peak_total = max(self.peak_total, total)
            for group, rss in by_group.items():
                self.peak_by_group[group] = max(self.peak_by_group.get(group, 0), rss)
            self._stop.wait(0.2)


def _pss_bytes(pid: int) -> int | None:
    """A process's proportional set size from ``/proc/<pid>/smaps_rollup`` (Linux), or None where unreadable."""
    try:
        with open(f"/proc/{pid}/smaps_rollup") as f:
            for line in f:
                if line.startswith("Pss:"):
                    return int(line.split()[1]) * 1024
    except OSError:
        return None
    return None


def run_measured(cmd: list[str], env: dict, groups: dict[str, str], log_path: str) -> TreeMemory:
    with open(log_path, "w") as log:
        proc = subprocess.Popen(cmd, env=env, stdout=log, stderr=subprocess.STDOUT)
        with TreeMemory(proc.pid, groups) as memory:
            code = proc.wait()
    if code != 0:
        with open(log_path) as f:
            tail = f.read()[-4000:]
        raise RuntimeError(f"{' '.join(cmd[:4])} ... exited with {code}; log {log_path}:\n{tail}")
    return memory


# ------------------------------------------------------------------------------------------------ TRL side
def trl_child(args) -> None:
    """Runs in its own process: TRL's GRPOTrainer; writes per-step seconds and generated tokens to a JSON file."""
    import pandas as pd
    from datasets import Dataset
    from transformers import AutoModelForCausalLM, AutoTokenizer, TrainerCallback
    from trl import GRPOConfig, GRPOTrainer

    from verl.utils.reward_score import default_compute_score

    df = pd.read_parquet(args.train_file)
    data = Dataset.from_dict(
        {
            "prompt": [list(p) for p in df["prompt"]],
            "ground_truth": [r["ground_truth"] for r in df["reward_model"]],
            "data_source": list(df["data_source"]),
        }
    )

    def reward(completions, ground_truth, data_source, **kwargs):
        return [
            float(default_compute_score(src, c[0]["content"], gt))
            for c, gt, src in zip(completions, ground_truth, data_source, strict=True)
        ]

    steps: list[float] = []
    tokens: list[int] = []
    phases: list[dict] = []
    phase_timer = TRLPhaseTimer(GRPOTrainer)

    class StepTimer(TrainerCallback):
        def on_step_begin(self, *a, **k):
            phase_timer.reset()
            self.start = time.perf_counter()

        def on_step_end(self, *a, **k):
            steps.append(time.perf_counter() - self.start)
            phases.append(phase_timer.seconds())

        def on_log(self, _args, state, control, logs=None, **k):
            if logs and "completions/mean_length" in logs:
                tokens.append(int(logs["completions/mean_length"] * args.prompts * args.n))

    config = GRPOConfig(
        output_dir=os.path.join(args.work_dir, "trl_out"),
        use_cpu=True,
        bf16=args.precision == "bf16",
        per_device_train_batch_size=args.prompts * args.n,
        num_generations=args.n,
        max_completion_length=args.response_length,
        beta=args.kl_coef,
        learning_rate=args.lr,
        max_steps=args.steps,
        logging_steps=1,
        save_strategy="no",
        report_to=[],
        seed=0,
        dataloader_num_workers=0,
    )
    tokenizer = AutoTokenizer.from_pretrained(args.model)
    model = AutoModelForCausalLM.from_pretrained(args.model)
    trainer = GRPOTrainer(
        model=model,
        reward_funcs=reward,
        args=config,
        train_dataset=data,
        processing_class=tokenizer,
        callbacks=[StepTimer()],
    )
    trainer.train()
    with open(args.result, "w") as f:
        json.dump({"step_s": steps, "tokens": tokens, "phases": phases}, f)


class TRLPhaseTimer:
    """Wraps GRPOTrainer's generate and log-prob methods to time them per step: ``gen``; ``ref`` (log-probs under
    no grad: the reference model, and old log-probs when TRL needs them); ``update_fwd`` (the training forward with
    grad). The rest of TRL's step is its backward, optimizer and bookkeeping."""

    def __init__(self, trainer_cls) -> None:
        self._seconds: dict[str, float] = {}
        self._wrap(trainer_cls, "_generate", lambda: "gen")
        self._wrap(trainer_cls, "_get_per_token_logps_and_entropies", self._logp_phase)

    @staticmethod
    def _logp_phase() -> str:
        import torch

        return "update_fwd" if torch.is_grad_enabled() else "ref"

    def _wrap(self, cls, name: str, phase_of) -> None:
        inner = getattr(cls, name, None)
        if inner is None:  # another TRL release: time the step only
            return

        def timed(*a, **k):
            start = time.perf_counter()
            try:
                return inner(*a, **k)
            finally:
                phase = phase_of()
                self._seconds[phase] = self._seconds.get(phase, 0.0) + time.perf_counter() - start

        setattr(cls, name, timed)

    def reset(self) -> None:
        self._seconds = {}

    def seconds(self) -> dict[str, float]:
        return dict(self._seconds)


# ------------------------------------------------------------------------------------------------ our side
def our_overrides(args, model: str, work_dir: str) -> list[str]:
    per_worker = args.prompts * args.n // args.workers
    micro = args.micro or per_worker
    return [
        "algorithm.adv_estimator=grpo",
        f"data.train_files={args.train_file}",
        f"data.val_files={args.train_file}",
        f"data.train_batch_size={args.prompts}",
        "data.max_prompt_length=64",
        f"data.max_response_length={args.response_length}",
        f"actor_rollout_ref.model.path={model}",
        f"actor_rollout_ref.actor.optim.lr={args.lr}",
        f"actor_rollout_ref.actor.ppo_mini_batch_size={args.prompts}",
        f"actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu={micro}",
        "actor_rollout_ref.actor.use_kl_loss=True",
        f"actor_rollout_ref.actor.kl_loss_coef={args.kl_coef}",
        f"actor_rollout_ref.rollout.name={args.rollout}",
        f"actor_rollout_ref.rollout.n={args.n}",
        f"actor_rollout_ref.rollout.log_prob_micro_batch_size_per_gpu={micro}",
        f"actor_rollout_ref.ref.log_prob_micro_batch_size_per_gpu={micro}",
        f"trainer.n_gpus_per_node={args.workers}",
        "trainer.device=cpu",
        f"trainer.total_training_steps={args.steps}",
        "trainer.test_freq=-1",
        "trainer.save_freq=-1",
        "trainer.val_before_train=False",
        "trainer.logger=['console']",
        f"trainer.default_local_dir={work_dir}/ours",
        *PRECISION_OVERRIDES[args.precision],
        *args.extra,
    ]


def measure_ours(args, model: str, work_dir: str) -> float:
    """Run main_ppo with ``args.rollout``; emit its figures; return its median step seconds."""
    os.makedirs(work_dir, exist_ok=True)
    tag = f"ours_{args.rollout}"
    cmd = [sys.executable, "-m", "verl.trainer.main_ppo", *our_overrides(args, model, work_dir)]
    # On the cluster main_ppo starts, the controller (trainer) runs in the driver process: its memory is "driver".
    # A TaskRunner actor appears only on a cluster that was already running.
    groups = {"workers": "ray::WorkerDict", "trainer": "ray::_TaskRunner"}
    memory = run_measured(cmd, dict(os.environ), groups, os.path.join(work_dir, "ours.log"))
    history = read_our_history(os.path.join(work_dir, "ours"))
    step = median_after_warmup([h["timing_s/step"] for h in history])
    emit(f"{tag}_step_s", round(step, 3), steps=[round(h["timing_s/step"], 2) for h in history])
    for phase in PHASES:
        key = f"timing_s/{phase}"
        if key in history[-1]:
            emit(f"{tag}_phase_{phase}_s", round(median_after_warmup([h[key] for h in history]), 3))
    tokens = median_after_warmup([h["response_length/mean"] * args.prompts * args.n for h in history])
    emit(f"{tag}_tokens_per_s", round(tokens / step, 1))
    emit(f"{tag}_peak_rss_gb", round(memory.peak_total / 2**30, 2))
    emit(f"{tag}_peak_pss_gb", round(memory.peak_pss / 2**30, 2))
    for group, rss in sorted(memory.peak_by_group.items()):
        emit(f"{tag}_peak_rss_gb_{group}", round(rss / 2**30, 2))
    for group, pss in sorted(memory.pss_by_group_at_peak.items()):
        emit(f"{tag}_pss_gb_at_peak_{group}", round(pss / 2**30, 2))
    return step


def read_our_history(run_dir: str) -> list[dict]:
    with open(os.path.join(run_dir, "metrics.jsonl")) as f:
        records = [json.loads(line) for line in f if line.strip()]
    return [r["metrics"] for r in records if r.get("kind") == "train"]


def median_after_warmup(values: list[float]) -> float:
    return statistics.median(values[1:] if len(values) > 1 else values)


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--size", choices=sorted(SIZES), default="25m")
    parser.add_argument("--rollout", default="vllm", help="vllm, hf, or both as vllm,hf (one TRL run for all)")
    parser.add_argument("--steps", type=int, default=4)
    parser.add_argument("--prompts", type=int, default=8)
    parser.add_argument("--n", type=int, default=4)
    parser.add_argument("--response-length", type=int, default=128)
    parser.add_argument("--kl-coef", type=float, default=0.001)
    parser.add_argument("--lr", type=float, default=1e-3)
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--micro", type=int, default=None, help="samples per micro batch (default: all of a rank's)")
    parser.add_argument(
        "--precision",
        choices=("fp32", "bf16"),
        default="fp32",
        help="training precision of both sides: fp32, or bf16 compute (TRL's bf16=True autocast; ours FSDP mixed "
        "precision with fp32 master weights, as verl on GPUs)",
    )
    parser.add_argument("--skip-trl", action="store_true", help="measure only our side")
    parser.add_argument("--work-dir", default=None)
    parser.add_argument("extra", nargs="*", help="extra Hydra overrides for main_ppo")
    parser.add_argument("--_trl_child", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--model", help=argparse.SUPPRESS)
    parser.add_argument("--train-file", help=argparse.SUPPRESS)
    parser.add_argument("--result", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args._trl_child:
        trl_child(args)
        return 0

    from verl.utils.builtin_assets import resolve_builtin_path
    from verl.utils.tiny_model import make_tiny_model_dir

    work_dir = args.work_dir or tempfile.mkdtemp(prefix="bench_vs_trl_")
    model = make_tiny_model_dir(os.path.join(work_dir, f"model_{args.size}"), **SIZES[args.size])
    args.train_file = resolve_builtin_path("builtin://arithmetic/train.parquet")
    n_params = _count_params(model)
    emit(
        "model",
        args.size,
        parameters=n_params,
        rollout=args.rollout,
        prompts=args.prompts,
        n=args.n,
        precision=args.precision,
    )
    cores = os.cpu_count() or 1

    ratio_inputs = {}
    if not args.skip_trl:
        result = os.path.join(work_dir, "trl_result.json")
        cmd = [sys.executable, __file__, "--_trl_child", "--model", model, "--train-file", args.train_file]
        cmd += [
            "--result",
            result,
            "--work-dir",
            work_dir,
            "--steps",
            str(args.steps),
            "--prompts",
            str(args.prompts),
            "--n",
            str(args.n),
            "--precision",
            args.precision,
        ]
        cmd += ["--response-length", str(args.response_length), "--kl-coef", str(args.kl_coef), "--lr", str(args.lr)]
        env = {**os.environ, "OMP_NUM_THREADS": str(cores), "TOKENIZERS_PARALLELISM": "false"}
        memory = run_measured(cmd, env, {}, os.path.join(work_dir, "trl.log"))
        with open(result) as f:
            trl = json.load(f)
        trl_step = median_after_warmup(trl["step_s"])
        ratio_inputs["trl"] = trl_step
        emit("trl_step_s", round(trl_step, 3), steps=[round(s, 2) for s in trl["step_s"]])
        for phase in ("gen", "ref", "update_fwd"):
            values = [p.get(phase, 0.0) for p in trl.get("phases", [])]
            if any(values):
                emit(f"trl_phase_{phase}_s", round(median_after_warmup(values), 3))
        if trl["tokens"]:
            emit("trl_tokens_per_s", round(median_after_warmup(trl["tokens"]) / trl_step, 1))
        emit("trl_peak_rss_gb", round(memory.peak_total / 2**30, 2))
        emit("trl_peak_pss_gb", round(memory.peak_pss / 2**30, 2))

    for rollout in args.rollout.split(","):
        args_r = argparse.Namespace(**{**vars(args), "rollout": rollout})
        ours = measure_ours(args_r, model, os.path.join(work_dir, f"ours_{rollout}"))
        if "trl" in ratio_inputs:
            ratio = round(ratio_inputs["trl"] / ours, 2)
            target = 2 if rollout == "vllm" else 1
            emit(f"ratio_trl_over_ours_{rollout}", ratio, target=f">= {target}")
    return 0


def _count_params(model_dir: str) -> int:
    from safetensors import safe_open

    total = 0
    for name in os.listdir(model_dir):
        if name.endswith(".safetensors"):
            with safe_open(os.path.join(model_dir, name), "pt") as f:
                for key in f.keys():
                    total += _numel(f.get_slice(key).get_shape())
    return total


def _numel(shape) -> int:
    out = 1
    for d in shape:
        out *= d
    return out


if __name__ == "__main__":
    sys.exit(main())
