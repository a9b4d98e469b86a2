"""A verl 0.9 command line's reward keys (``reward.*``) reach the runtime: one GRPO step of the built-in demo on the
in-process worker group scores with the function named by ``reward.custom_reward_function.{path,name}`` and through
the reward loop with ``reward.num_workers`` scoring threads (``reward_model.use_reward_loop``, this project's key)."""

import math

import pytest

from tests.trainer.ppo_e2e_utils import demo_run_overrides, fit_demo_inprocess

SCORE = 0.375


@pytest.mark.slow
def test_verl_09_reward_keys_score_a_grpo_step(tmp_path, no_process_group_left):
    reward_file = tmp_path / "constant_reward.py"
    reward_file.write_text(
        f"def constant(data_source, solution_str, ground_truth, extra_info=None):\n    return {SCORE}\n"
    )
    trainer = fit_demo_inprocess(
        demo_run_overrides(tmp_path / "ckpt", steps=1)
        + [
            "data.train_batch_size=2",
            "actor_rollout_ref.rollout.n=2",
            "actor_rollout_ref.actor.ppo_mini_batch_size=2",
            "actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu=4",
            f"reward.custom_reward_function.path={reward_file}",
            "reward.custom_reward_function.name=constant",
            "reward.num_workers=2",
            "reward_model.use_reward_loop=True",
        ]
    )
    (metrics,) = trainer.steps
    assert math.isclose(metrics["critic/score/mean"], SCORE, rel_tol=1e-6), metrics["critic/score/mean"]
    assert metrics["reward_loop/chunks"] >= 1
    assert trainer._reward_loop_instance.workers == 2
