"""Checkpoint and exact resume through main_ppo: a run SIGKILLed after an epoch-ending step and resumed matches a
run that was never stopped (data order, step numbers, metrics); then the checkpoint exports to Hugging Face."""

import json
import os
import signal
import subprocess
import sys
import time

import pytest

from tests.trainer.ppo_e2e_utils import (
    base_overrides,
    make_gsm8k_like_parquet,
    make_workspace,
    parse_console_metrics,
    run_main_ppo,
    write_reward_fn,
)

STEPS_PER_EPOCH = 2
TOTAL_STEPS = 4


def overrides_for(ws, run_dir):
    return base_overrides(ws, "grpo", steps=TOTAL_STEPS) + [
        f"custom_reward_function.path={ws['reward']}",
        f"trainer.default_local_dir={run_dir}/ckpt",
        f"trainer.rollout_data_dir={run_dir}/rollouts",
        "trainer.total_epochs=2",
        "trainer.total_training_steps=null",
        "trainer.save_freq=2",
        "trainer.max_actor_ckpt_to_keep=1",
        "trainer.resume_mode=auto",
        "data.shuffle=True",
    ]


def kill_tree(pid):
    """SIGKILL the driver and everything it started (Ray's GCS, raylet and the workers) at once."""
    import psutil

    parent = psutil.Process(pid)
    processes = [parent, *parent.children(recursive=True)]
    for p in processes:
        try:
            p.send_signal(signal.SIGKILL)
        except psutil.NoSuchProcess:
            pass


def rollouts(run_dir, step):
    with open(os.path.join(run_dir, "rollouts", f"{step}.jsonl")) as f:
        return [(r["input"], r["output"]) for r in map(json.loads, f)]


def tracker(run_dir):
    path = os.path.join(run_dir, "ckpt", "latest_checkpointed_iteration.txt")
    return open(path).read().strip() if os.path.exists(path) else None


@pytest.fixture(scope="module")
def workspace(tmp_path_factory):
    root = tmp_path_factory.mktemp("resume")
    ws = make_workspace(root)
    # 8 prompts, batch 4: 2 steps per epoch, so step 2 ends epoch 0
    ws["train"] = make_gsm8k_like_parquet(str(root / "train8.parquet"), 4 * STEPS_PER_EPOCH)
    ws["reward"] = write_reward_fn(root)
    return ws


@pytest.mark.slow
def test_kill_and_resume_equals_uninterrupted_run(workspace):
    root = workspace["root"]
    reference_dir, resumed_dir = os.path.join(root, "reference"), os.path.join(root, "resumed")
    reference = run_main_ppo(overrides_for(workspace, reference_dir), cwd=root)
    assert reference.returncode == 0, reference.stderr[-3000:]
    ref_steps = {int(s["step"]): s for s in parse_console_metrics(reference.stdout) if "training/global_step" in s}
    assert sorted(ref_steps) == [1, 2, 3, 4]

    # first attempt: SIGKILL as soon as the epoch-ending step 2 is checkpointed
    cmd = [sys.executable, "-m", "verl.trainer.main_ppo", *overrides_for(workspace, resumed_dir)]
    env = dict(os.environ, RAY_DEDUP_LOGS="0", TOKENIZERS_PARALLELISM="false")
    proc = subprocess.Popen(cmd, cwd=root, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    deadline = time.monotonic() + 300
    while tracker(resumed_dir) != "2" and time.monotonic() < deadline and proc.poll() is None:
        time.sleep(0.02)
    assert tracker(resumed_dir) == "2", "the first attempt never checkpointed step 2"
    kill_tree(proc.pid)
    proc.wait()
    assert tracker(resumed_dir) == "2", "the killed run got past step 2"

    resumed = run_main_ppo(overrides_for(workspace, resumed_dir), cwd=root)
    assert resumed.returncode == 0, resumed.stderr[-3000:]
    res_steps = {int(s["step"]): s for s in parse_console_metrics(resumed.stdout) if "training/global_step" in s}
    assert sorted(res_steps) == [3, 4], "the resumed run must continue at step 3, epoch 1 (not skip the epoch)"
    for step in (3, 4):
        assert res_steps[step]["training/epoch"] == ref_steps[step]["training/epoch"] == 1
        assert rollouts(resumed_dir, step) == rollouts(reference_dir, step)  # same prompts, same samples
        for key in ("critic/score/mean", "actor/pg_loss", "actor/entropy", "actor/grad_norm", "response_length/mean"):
            assert res_steps[step][key] == pytest.approx(ref_steps[step][key], abs=2e-3), key
    # max_actor_ckpt_to_keep=1: only the newest checkpoint remains
    assert sorted(os.listdir(os.path.join(resumed_dir, "ckpt"))) == [
        "global_step_4",
        "latest_checkpointed_iteration.txt",
    ] or "global_step_2" not in os.listdir(os.path.join(resumed_dir, "ckpt"))

    # export the final actor to a Hugging Face folder and load it
    target = os.path.join(root, "hf_export")
    merge = subprocess.run(
        [
            sys.executable,
            "-m",
            "verl.model_merger",
            "merge",
            "--backend",
            "fsdp",
            "--local_dir",
            os.path.join(resumed_dir, "ckpt", "global_step_4", "actor"),
            "--target_dir",
            target,
            "--dtype",
            "float32",
        ],
        capture_output=True,
        text=True,
    )
    assert merge.returncode == 0, merge.stderr[-3000:]
    from transformers import AutoModelForCausalLM, AutoTokenizer

    AutoModelForCausalLM.from_pretrained(target)
    AutoTokenizer.from_pretrained(target)
