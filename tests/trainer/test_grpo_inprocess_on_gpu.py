"""20 GRPO steps of the built-in task on one accelerator through the in-process worker group and the HF rollout.

The shipped model and task (``builtin://``), the shipped GRPO defaults, one worker in this process (no Ray). On the
accelerator the run must learn: validation accuracy after 20 steps above the one before training, and the mean
training reward of the last 5 steps above that of the first 5. Skipped without an accelerator unless
``VERL_GPU_CHECK_DEVICE=cpu`` (then 2 steps and finite metrics only: a smoke test of the same path).
"""

import math

from tests.trainer.ppo_e2e_utils import build_demo_inprocess
from verl.utils.device import get_device_name, is_accelerator_available

ON_DEVICE = is_accelerator_available()
STEPS = 20 if ON_DEVICE else 2
VAL_KEY = "val-core/verl/arithmetic/reward/mean@1"


def test_grpo_builtin_task_learns_in_process(tmp_path, no_process_group_left):
    overrides = [
        "trainer.n_gpus_per_node=1",
        f"trainer.device={get_device_name()}",
        f"trainer.total_training_steps={STEPS}",
        f"trainer.test_freq={STEPS}",
        "trainer.save_freq=-1",
        "trainer.logger=['console']",
        "trainer.run_report=False",
        f"trainer.default_local_dir={tmp_path / 'ckpt'}",
        "actor_rollout_ref.rollout.name=hf",
    ]
    # no data and no model named: the built-in demo, chosen as main_ppo chooses it
    trainer = build_demo_inprocess(overrides)
    trainer.init_workers()
    trainer.fit()

    assert len(trainer.steps) == STEPS
    for metrics in trainer.steps:
        for key in ("actor/pg_loss", "actor/grad_norm", "critic/score/mean", "perf/throughput"):
            assert math.isfinite(metrics[key]), (key, metrics[key])
    before, after = trainer.validations[0][VAL_KEY], trainer.validations[-1][VAL_KEY]
    assert len(trainer.validations) == 2 and 0.0 <= before <= 1.0 and 0.0 <= after <= 1.0
    if ON_DEVICE:
        rewards = [m["critic/score/mean"] for m in trainer.steps]
        assert sum(rewards[-5:]) / 5 > sum(rewards[:5]) / 5, rewards
        assert after > before, (before, after)
