"""``python -m recipe.sppo.main_sppo`` end to end: 2 SPPO steps with a tiny model and the HF rollout, in Ray on CPU."""

import math
import os

from tests.trainer.ppo_e2e_utils import (
    base_overrides,
    make_workspace,
    parse_console_metrics,
    run_main_ppo,
    write_reward_fn,
)

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def test_main_sppo_two_steps(tmp_path):
    ws = make_workspace(tmp_path)
    # verl's GRPO line without the estimator and KL loss (SPPO's config sets both), one worker process
    drop = ("algorithm.adv_estimator=", "actor_rollout_ref.actor.use_kl_loss=", "trainer.n_gpus_per_node=")
    overrides = [o for o in base_overrides(ws, steps=2) if not o.startswith(drop)] + [
        "trainer.n_gpus_per_node=1",
        "ray_init.num_cpus=2",
        "actor_rollout_ref.actor.ppo_mini_batch_size=2",  # two mini batches: old log-probs from their own pass
        "actor_rollout_ref.actor.sppo_eta=2.0",
        "algorithm.sppo_eta=0.5",
        f"custom_reward_function.path={write_reward_fn(tmp_path)}",
        "trainer.run_report=False",
    ]
    env = {k: v for k, v in os.environ.items() if k != "RAY_ADDRESS"}  # a local cluster of its own
    result = run_main_ppo(overrides, cwd=REPO, env=env, module="recipe.sppo.main_sppo")
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    steps = parse_console_metrics(result.stdout + result.stderr)
    assert [int(s["step"]) for s in steps] == [1, 2], steps
    for metrics in steps:
        for key in ("actor/pg_loss", "actor/grad_norm", "actor/ppo_kl", "critic/advantages/mean"):
            assert math.isfinite(metrics[key]), (key, metrics)
        assert metrics["actor/grad_norm"] > 0
        assert metrics["actor/pg_clipfrac"] == 0.0  # SPPO clips nothing
        # the centred rewards straddle zero whenever the scores differ
        if metrics["critic/score/max"] > metrics["critic/score/min"]:
            assert metrics["critic/advantages/min"] < 0 < metrics["critic/advantages/max"]
