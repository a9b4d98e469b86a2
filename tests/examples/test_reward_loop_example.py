"""The reward-loop example (examples/reward_loop): GRPO on the built-in task, 2 steps, with a hybrid reward of the
built-in rule and a tiny generative judge that the trainer serves behind its router; the example's verl-style
``async`` reward function calls ``reward_router_address``. In-process worker group: without Ray the judge's replica
lives in this process."""

import math
import os

from tests.trainer.ppo_e2e_utils import build_demo_inprocess
from verl.demo.tiny_model import make_tiny_model_dir
from verl.trainer.ppo.reward import get_served_reward_model
from verl.workers.reward_model.served import _ray_running

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
EXAMPLE = os.path.join(ROOT, "examples", "reward_loop")


def test_grpo_with_rule_and_served_judge(tmp_path, no_process_group_left):
    judge = make_tiny_model_dir(str(tmp_path / "judge"), hidden_size=64, num_layers=2, num_heads=4, num_kv_heads=2)
    judge_fn = os.path.join(EXAMPLE, "judge_reward.py")
    overrides = [
        "trainer.n_gpus_per_node=1",
        "trainer.device=cpu",
        "trainer.total_training_steps=2",
        "trainer.test_freq=-1",
        "trainer.val_before_train=False",
        "trainer.save_freq=-1",
        "trainer.logger=['console']",
        "trainer.run_report=False",
        f"trainer.default_local_dir={tmp_path / 'ckpt'}",
        "data.train_batch_size=4",
        "actor_rollout_ref.rollout.n=4",
        "actor_rollout_ref.actor.ppo_mini_batch_size=4",
        "actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu=16",
        "reward_model.use_reward_loop=True",
        "reward_model.enable=True",
        f"reward_model.model.path={judge}",
        "reward_model.rollout.name=hf",
        "reward_model.rollout.tensor_model_parallel_size=1",
        "reward_model.rollout.dtype=float32",
        "reward_model.rollout.response_length=8",
        f"reward_model.reward_sources=[{{name:rule,weight:1.0}},{{name:judge,weight:0.5,path:{judge_fn}}}]",
    ]
    trainer = build_demo_inprocess(overrides)  # the built-in task and model
    config = trainer.config
    trainer.init_workers()
    trainer.fit()

    served = get_served_reward_model(config)
    try:
        assert len(trainer.steps) == 2
        for metrics in trainer.steps:
            rule, judged = metrics["reward/rule/mean"], metrics["reward/judge/mean"]
            assert 0.0 <= rule <= 1.0 and 0.0 <= judged <= 1.0
            # the combined reward is the weighted sum of the sources (GRPO: one outcome score per response)
            assert math.isclose(metrics["critic/score/mean"], rule + 0.5 * judged, rel_tol=1e-4, abs_tol=1e-5)
            assert metrics["reward/failed_calls"] == 0
        # the async function reached the judge through reward_router_address: one request per response and step
        assert sum(served.router.requests) == 2 * 4 * 4
        # one slot (trainer.n_gpus_per_node=1): one replica, in this process unless an earlier test left Ray running
        assert served.replicas == 1 and len(served.actors) == (1 if _ray_running() else 0)
    finally:
        served.stop()
