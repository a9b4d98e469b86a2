"""Tiny models, data and command lines for end-to-end runs of main_ppo on CPU."""

from __future__ import annotations

import os
import subprocess
import sys

import pandas as pd

from verl.demo.tiny_model import make_tiny_model_dir


def make_gsm8k_like_parquet(path: str, n: int, seed: int = 0) -> str:
    """Rows in verl's RL schema: short arithmetic questions scored by the gsm8k rule ('#### answer')."""
    rows = []
    for i in range(n):
        a, b = (seed + 3 * i) % 10, (seed + 7 * i) % 10
        rows.append(
            {
                "data_source": "openai/gsm8k",
                "prompt": [{"role": "user", "content": f"{a}+{b}="}],
                "ability": "math",
                "reward_model": {"style": "rule", "ground_truth": str(a + b)},
                "extra_info": {"split": "train", "index": i},
            }
        )
    pd.DataFrame(rows).to_parquet(path)
    return path


def make_workspace(tmp_path) -> dict:
    """A tiny actor/critic model and train/val parquet files under ``tmp_path``."""
    model = make_tiny_model_dir(
        str(tmp_path / "model"), hidden_size=32, num_layers=1, num_heads=2, num_kv_heads=1, intermediate_size=64
    )
    critic = make_tiny_model_dir(
        str(tmp_path / "critic"),
        head="token_classification",
        hidden_size=32,
        num_layers=1,
        num_heads=2,
        num_kv_heads=1,
        intermediate_size=64,
    )
    train = make_gsm8k_like_parquet(str(tmp_path / "train.parquet"), 16)
    val = make_gsm8k_like_parquet(str(tmp_path / "val.parquet"), 4, seed=1)
    return {"model": model, "critic": critic, "train": train, "val": val, "root": str(tmp_path)}


def base_overrides(ws: dict, estimator: str = "grpo", steps: int = 2) -> list[str]:
    """A verl GRPO/PPO command line scaled down to the tiny model, 2 CPU workers."""
    return [
        f"algorithm.adv_estimator={estimator}",
        f"data.train_files={ws['train']}",
        f"data.val_files={ws['val']}",
        "data.train_batch_size=4",
        "data.max_prompt_length=32",
        "data.max_response_length=8",
        f"actor_rollout_ref.model.path={ws['model']}",
        "actor_rollout_ref.actor.optim.lr=1e-3",
        "actor_rollout_ref.actor.ppo_mini_batch_size=4",
        "actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu=2",
        "actor_rollout_ref.actor.use_kl_loss=True",
        "actor_rollout_ref.rollout.name=hf",
        "actor_rollout_ref.rollout.n=2",
        "actor_rollout_ref.rollout.tensor_model_parallel_size=1",
        "actor_rollout_ref.rollout.log_prob_micro_batch_size_per_gpu=4",
        "actor_rollout_ref.ref.log_prob_micro_batch_size_per_gpu=4",
        f"critic.model.path={ws['critic']}",
        "critic.ppo_micro_batch_size_per_gpu=2",
        "trainer.logger=['console']",
        # verl's full console line: these tests read every metric of a step from it
        "trainer.console_format=full",
        "trainer.n_gpus_per_node=2",
        "trainer.nnodes=1",
        "trainer.device=cpu",
        f"trainer.total_training_steps={steps}",
        "trainer.test_freq=-1",
        "trainer.save_freq=-1",
        "trainer.val_before_train=False",
        f"trainer.default_local_dir={ws['root']}/ckpt",
        "ray_init.num_cpus=4",
    ]


# read at collection, before any test runs
_SHELL_OMP_NUM_THREADS = os.environ.get("OMP_NUM_THREADS")


def run_main_ppo(
    overrides: list[str], cwd: str, timeout: int = 600, env: dict | None = None, module: str = "verl.trainer.main_ppo"
) -> subprocess.CompletedProcess:
    """``python -m verl.trainer.main_ppo <overrides>`` (or a recipe's entry ``module``) in a subprocess, as a user
    would run it (``env``: its environment instead of this process's)."""
    env = dict(env or os.environ, VERL_LOGGING_LEVEL="WARNING", RAY_DEDUP_LOGS="0", TOKENIZERS_PARALLELISM="false")
    # in-process tests before this one set OMP_NUM_THREADS here (use_cpu_share): give the run the shell's value, as a
    # user's run would have, not whatever an earlier test left
    env.pop("OMP_NUM_THREADS", None)
    if _SHELL_OMP_NUM_THREADS is not None:
        env["OMP_NUM_THREADS"] = _SHELL_OMP_NUM_THREADS
    return subprocess.run(
        [sys.executable, "-m", module, *overrides],
        cwd=cwd,
        env=env,
        capture_output=True,
        text=True,
        timeout=timeout,
    )


REWARD_FN = '''
def compute_score(data_source, solution_str, ground_truth, extra_info=None):
    """Dense toy reward: the share of digits in the response (varies between samples of a random model)."""
    if not solution_str:
        return 0.0
    return sum(ch.isdigit() for ch in solution_str) / len(solution_str)
'''


def write_reward_fn(root) -> str:
    path = os.path.join(str(root), "digit_reward.py")
    with open(path, "w") as f:
        f.write(REWARD_FN)
    return path


def with_rollout_name(overrides) -> list[str]:
    """``overrides`` naming the rollout engine: verl 0.9 requires ``actor_rollout_ref.rollout.name``; a test command
    line that leaves it out gets ``hf`` (what the tests run)."""
    overrides = list(overrides)
    if not any(o.lstrip("+").startswith("actor_rollout_ref.rollout.name=") for o in overrides):
        overrides.append("actor_rollout_ref.rollout.name=hf")
    return overrides


def compose_config(overrides: list[str], config_name: str = "ppo_trainer"):
    """The ``config_name`` config (``--config-name``) with ``overrides`` (:func:`with_rollout_name`), composed as the
    Hydra app would."""
    overrides = with_rollout_name(overrides)
    from hydra import compose, initialize_config_dir

    import verl.trainer

    config_dir = os.path.join(os.path.dirname(verl.trainer.__file__), "config")
    with initialize_config_dir(config_dir=config_dir, version_base=None):
        return compose(config_name=config_name, overrides=overrides)


def parse_console_metrics(stdout: str) -> list[dict]:
    """The ``step:N - key:value - ...`` lines of the console logger, as dicts."""
    steps = []
    for line in stdout.splitlines():
        start = line.find("step:")
        if start < 0 or " - " not in line[start:]:
            continue
        entry = {}
        for part in line[start:].split(" - "):
            key, _, value = part.rpartition(":")
            try:
                entry[key.strip()] = float(value)
            except ValueError:
                continue
        if "step" in entry:
            steps.append(entry)
    return steps


def demo_run_overrides(local_dir, steps: int) -> list[str]:
    """Overrides of a short, quiet run of the built-in demo on one in-process CPU worker (no validation, no saves)."""
    return [
        "trainer.n_gpus_per_node=1",
        "trainer.device=cpu",
        f"trainer.total_training_steps={steps}",
        "trainer.test_freq=-1",
        "trainer.val_before_train=False",
        "trainer.save_freq=-1",
        "trainer.logger=['console']",
        "trainer.run_report=False",
        f"trainer.default_local_dir={local_dir}",
    ]


def build_inprocess(config, trainer_cls=None):
    """``config`` prepared as main_ppo prepares it and built as ``trainer_cls`` (default: a ``StepRecordingTrainer``
    with empty records) over the in-process worker group; workers not yet started."""
    from tests.trainer.recording_trainer import StepRecordingTrainer
    from verl.single_controller.inprocess import InProcessWorkerGroup
    from verl.trainer.main_ppo import build_trainer, prepare_config

    prepare_config(config)
    trainer = build_trainer(config, ray_worker_group_cls=InProcessWorkerGroup)
    trainer.__class__ = trainer_cls or StepRecordingTrainer
    if isinstance(trainer, StepRecordingTrainer):
        trainer.start_recording()
    return trainer


def build_demo_inprocess(overrides: list[str], trainer_cls=None):
    """The built-in demo run (no data and no model named, as main_ppo chooses it) with ``overrides``, built by
    ``build_inprocess``."""
    from verl.demo.default_run import apply_builtin_demo, command_line_keys

    config = compose_config(overrides)
    assert apply_builtin_demo(config, command_line_keys(overrides)), "the overrides name data or a model"
    return build_inprocess(config, trainer_cls)


def fit_demo_inprocess(overrides: list[str], trainer_cls=None):
    """Build the built-in demo run with ``overrides`` as a ``trainer_cls`` over the in-process worker group, fit it,
    and return the trainer (the process group it started is destroyed)."""
    import torch.distributed as dist

    trainer = build_demo_inprocess(overrides, trainer_cls)
    try:
        trainer.init_workers()
        trainer.fit()
    finally:
        if dist.is_initialized():
            dist.destroy_process_group()
    return trainer
