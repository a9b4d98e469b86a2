"""DAPO and the entropy recipe end to end on CPU: ``python -m recipe.dapo.main_dapo`` with verl-style overrides on a
Ray worker, and the entropy recipe's trainer on the in-process worker group.

The reward function gives every response of an even-numbered prompt the same score and the responses of the other
prompts scores that differ, so dynamic sampling must drop exactly those groups and generate again.
"""

import math
import os
import subprocess
import sys

import pytest
import torch
import torch.distributed as dist

from recipe.dapo.dapo_ray_trainer import RayDAPOTrainer
from recipe.dapo.main_dapo import check_dapo_config
from tests.recipe.dapo_utils import compose_recipe_config
from tests.trainer.ppo_e2e_utils import base_overrides, make_workspace, parse_console_metrics
from verl.single_controller.inprocess import InProcessWorkerGroup
from verl.trainer.main_ppo import build_trainer, prepare_config

REWARD_FN = '''
def compute_score(data_source, solution_str, ground_truth, extra_info=None, keep_every=2):
    """Constant for prompts whose index is not a multiple of keep_every; otherwise a value that differs between
    different responses."""
    index = extra_info["index"]
    if index % keep_every:
        return {"score": 0.5, "index": index}
    spread = sum((i + 1) * ord(ch) for i, ch in enumerate(solution_str)) % 1000 / 1000
    return {"score": spread, "index": index}
'''


@pytest.fixture(scope="module")
def workspace(tmp_path_factory):
    root = tmp_path_factory.mktemp("dapo")
    ws = make_workspace(root)
    ws["reward"] = str(root / "spread_reward.py")
    with open(ws["reward"], "w") as f:
        f.write(REWARD_FN)
    yield ws
    if dist.is_initialized():
        dist.destroy_process_group()


def dapo_overrides(ws, steps: int) -> list[str]:
    """The tiny GRPO command line of the PPO tests with DAPO's keys, one worker, prompts in file order."""
    replaced = ("actor_rollout_ref.actor.use_kl_loss=", "trainer.n_gpus_per_node=")
    return [o for o in base_overrides(ws, "grpo", steps=steps) if not o.startswith(replaced)] + [
        "trainer.n_gpus_per_node=1",
        "actor_rollout_ref.actor.use_kl_loss=False",
        "data.shuffle=False",
        "data.gen_batch_size=4",
        f"custom_reward_function.path={ws['reward']}",
        "algorithm.filter_groups.enable=True",
        "algorithm.filter_groups.metric=score",
        "algorithm.filter_groups.max_num_gen_batches=3",
        "reward_model.overlong_buffer.enable=True",
        "reward_model.overlong_buffer.len=2",
        "reward_model.overlong_buffer.penalty_factor=0.1",
        "trainer.resume_mode=disable",
        "trainer.run_report=False",
    ]


@pytest.mark.slow
def test_main_dapo_cli_two_steps(workspace):
    env = dict(os.environ, VERL_LOGGING_LEVEL="WARNING", RAY_DEDUP_LOGS="0", TOKENIZERS_PARALLELISM="false")
    result = subprocess.run(
        [sys.executable, "-m", "recipe.dapo.main_dapo", *dapo_overrides(workspace, steps=2)],
        cwd=workspace["root"],
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert result.returncode == 0, result.stderr[-4000:]
    steps = [s for s in parse_console_metrics(result.stdout) if "training/global_step" in s]
    assert [int(s["step"]) for s in steps] == [1, 2], result.stdout[-3000:]
    for step in steps:
        # 4 prompts per generation batch, 2 of them with a spread: two batches fill train_batch_size=4
        assert step["train/num_gen_batches"] == 2
        assert math.isfinite(step["actor/pg_loss"]) and step["actor/grad_norm"] > 0


class RecordingDAPOTrainer(RayDAPOTrainer):
    def train_step(self, batch, timing_raw):
        batch, metrics = super().train_step(batch, timing_raw)
        if batch is not None:
            self.logged.append((metrics, batch))
        return batch, metrics


@pytest.mark.slow
@pytest.mark.parametrize(
    ("loss_mode", "keep_every", "gen_batches"),
    [
        # 16 prompts, 4 per generation batch, 2 kept from each: two steps of two batches
        ("clip_cov", 2, [2, 2]),
        # prompts 0, 3, 6, 9 fill the first step after 3 batches; the 4th batch keeps 12 and 15 and the data ends
        ("kl_cov", 3, [3]),
    ],
)
def test_entropy_recipe_in_process(workspace, loss_mode, keep_every, gen_batches):
    overrides = dapo_overrides(workspace, steps=5) + [
        f"actor_rollout_ref.actor.policy_loss.loss_mode={loss_mode}",
        "actor_rollout_ref.actor.policy_loss.clip_cov_ratio=0.2",
        "actor_rollout_ref.actor.policy_loss.kl_cov_ratio=0.2",
        f"+custom_reward_function.reward_kwargs.keep_every={keep_every}",
        "algorithm.filter_groups.max_num_gen_batches=0",
        "trainer.total_epochs=1",
    ]
    config = compose_recipe_config("entropy", "entropy_trainer", overrides)
    check_dapo_config(config)
    prepare_config(config)
    trainer = build_trainer(config, ray_worker_group_cls=InProcessWorkerGroup, trainer_cls=RecordingDAPOTrainer)
    trainer.logged = []
    trainer.init_workers()
    worker = trainer.actor_rollout_wg.workers[0].worker_dict["actor_rollout"]
    before = {k: v.detach().clone() for k, v in worker.actor_module.state_dict().items()}
    trainer.fit()
    assert [m["train/num_gen_batches"] for m, _ in trainer.logged] == gen_batches
    for metrics, batch in trainer.logged:
        assert len(batch) == 4 * 2  # train_batch_size * n
        assert all(index % keep_every == 0 for index in batch.non_tensor_batch["index"])
        assert math.isfinite(metrics["actor/pg_loss"]) and metrics["actor/grad_norm"] > 0
    after = worker.actor_module.state_dict()
    assert any(not torch.equal(before[k], after[k]) for k in before)
