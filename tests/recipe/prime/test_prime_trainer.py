"""RayPRIMETrainer end to end: the implicit PRM trains, is checkpointed with the step and restored on resume
(in-process workers), and ``python -m recipe.prime.main_prime`` runs 2 steps on CPU through Ray."""

import math
import os
import subprocess
import sys

import pytest
import torch
import torch.distributed as dist

from recipe.prime.main_prime import prepare_prime_config
from recipe.prime.prime_fsdp_workers import PRIMERewardModelWorker
from recipe.prime.prime_ray_trainer import RayPRIMETrainer
from tests.recipe.prime.prime_test_utils import compose_prime_config, prime_overrides
from tests.trainer.ppo_e2e_utils import make_workspace, parse_console_metrics, write_reward_fn
from verl.single_controller.inprocess import InProcessWorkerGroup
from verl.trainer.main_ppo import build_trainer


@pytest.fixture(scope="module")
def workspace(tmp_path_factory):
    root = tmp_path_factory.mktemp("prime")
    ws = make_workspace(root)
    ws["reward"] = write_reward_fn(root)
    yield ws
    if dist.is_initialized():
        dist.destroy_process_group()


class RecordingPRIMETrainer(RayPRIMETrainer):
    """Keeps each step's metrics and final batch."""

    def train_step(self, batch, timing_raw):
        batch, metrics = super().train_step(batch, timing_raw)
        self.__dict__.setdefault("steps", []).append((batch, metrics))
        return batch, metrics


def make_trainer(ws, ckpt_dir, extra=()):
    config = compose_prime_config(
        prime_overrides(ws, steps=1) + [f"trainer.default_local_dir={ckpt_dir}", "trainer.save_freq=1", *extra]
    )
    prepare_prime_config(config)
    trainer = build_trainer(
        config, InProcessWorkerGroup, trainer_cls=RecordingPRIMETrainer, reward_model_cls=PRIMERewardModelWorker
    )
    trainer.init_workers()
    return trainer


def rm_worker(trainer):
    return trainer.rm_wg.workers[0].worker_dict["rm"]


def rm_state(trainer) -> dict[str, torch.Tensor]:
    return {k: v.detach().clone() for k, v in rm_worker(trainer).reward_module.state_dict().items()}


def test_prm_trains_and_survives_checkpoint_resume(workspace, tmp_path):
    ckpt = tmp_path / "ckpt"
    trainer = make_trainer(workspace, ckpt)
    assert len(trainer.train_dataloader) == 16 // 4  # 2 prompts trained per step, 2 x oversampled
    before = rm_state(trainer)
    trainer.fit()
    after = rm_state(trainer)
    assert [k for k in before if not torch.equal(before[k], after[k])], "no PRM parameter changed"

    batch, metrics = trainer.steps[0]
    assert len(batch) == 2 * 2  # train_batch_size prompts x rollout.n after down-sampling from 4 prompts
    for key in ("reward_model/dpo_loss", "reward_model/grad_norm", "batch/acc", "batch/filter_pass_ratio"):
        assert key in metrics and math.isfinite(metrics[key]), (key, metrics.get(key))
    mask = batch.batch["response_mask"].bool()
    assert batch.batch["rm_scores"][mask].abs().sum() > 0 and (batch.batch["rm_scores"][~mask] == 0).all()
    assert batch.batch["advantages"][mask].std() > 0

    step_dir = ckpt / "global_step_1"
    assert (step_dir / "reward").is_dir() and (step_dir / "actor").is_dir()

    # a new run resumes: the PRM's weights and optimizer state are those saved, not the initial ones
    resumed = make_trainer(workspace, ckpt, extra=["trainer.resume_mode=auto"])
    assert all(torch.equal(before[k], v) for k, v in rm_state(resumed).items())  # freshly loaded from the path
    assert resumed._load_checkpoint() == 1
    restored = rm_state(resumed)
    for key, value in after.items():
        torch.testing.assert_close(restored[key], value, rtol=0, atol=0)
    saved_opt = rm_worker(trainer).optimizer.state_dict()["state"]
    restored_opt = rm_worker(resumed).optimizer.state_dict()["state"]
    assert saved_opt.keys() == restored_opt.keys() and saved_opt
    for idx, state in saved_opt.items():
        torch.testing.assert_close(restored_opt[idx]["exp_avg"], state["exp_avg"], rtol=0, atol=0)


@pytest.mark.parametrize("update_and_loss", [("after", "dpo"), ("none", "ce")])
def test_prm_update_styles(workspace, tmp_path, update_and_loss):
    update, loss_type = update_and_loss
    trainer = make_trainer(
        workspace,
        tmp_path / "ckpt",
        extra=[
            f"reward_model.model.update={update}",
            f"reward_model.model.loss_type={loss_type}",
            "reward_model.prime_granularity=whole",
            "trainer.save_freq=-1",
        ],
    )
    before = rm_state(trainer)
    trainer.fit()
    changed = any(not torch.equal(v, rm_state(trainer)[k]) for k, v in before.items())
    batch, metrics = trainer.steps[0]
    assert changed is (update != "none")
    assert ("reward_model/dpo_loss" in metrics) is (update != "none")
    # whole: one PRM reward per response, at its last token
    assert ((batch.batch["rm_scores"] != 0).sum(-1) <= 1).all()


def test_main_prime_two_steps_on_cpu(workspace, tmp_path):
    overrides = prime_overrides(workspace, steps=2) + [
        f"trainer.default_local_dir={tmp_path}/ckpt",
        "trainer.save_freq=2",
    ]
    # a cluster of its own, even where another run on this machine left one started
    env = dict(os.environ, VERL_LOGGING_LEVEL="WARNING", RAY_DEDUP_LOGS="0", TOKENIZERS_PARALLELISM="false")
    env["RAY_ADDRESS"] = "local"
    result = subprocess.run(
        [sys.executable, "-m", "recipe.prime.main_prime", *overrides],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    steps = parse_console_metrics(result.stdout)
    assert [int(s["step"]) for s in steps] == [1, 2], result.stdout[-2000:]
    for step in steps:
        assert math.isfinite(step["reward_model/dpo_loss"]) and math.isfinite(step["actor/pg_loss"])
    assert (tmp_path / "ckpt" / "global_step_2" / "reward").is_dir()
