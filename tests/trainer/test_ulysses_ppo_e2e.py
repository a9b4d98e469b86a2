"""PPO with a critic (GAE) and Ulysses sequence parallelism (sp=2) end to end: two Ray CPU workers, HF rollout."""

import pytest

from tests.trainer.ppo_e2e_utils import base_overrides, make_workspace, parse_console_metrics, run_main_ppo


@pytest.mark.slow
def test_ppo_with_critic_sequence_parallel_cli(tmp_path):
    ws = make_workspace(tmp_path)  # 2 attention heads: sp=2 gives each rank one
    overrides = base_overrides(ws, "gae", steps=2) + [
        # actor, reference (KL loss) and critic each split every packed sequence over both workers (dp=1)
        "actor_rollout_ref.model.use_remove_padding=True",
        "actor_rollout_ref.actor.ulysses_sequence_parallel_size=2",
        "critic.model.use_remove_padding=True",
        "critic.ulysses_sequence_parallel_size=2",
        "trainer.resume_mode=disable",
    ]
    result = run_main_ppo(overrides, cwd=ws["root"])
    assert result.returncode == 0, result.stderr[-4000:]
    steps = [s for s in parse_console_metrics(result.stdout) if "training/global_step" in s]
    assert [int(s["step"]) for s in steps] == [1, 2], result.stdout[-3000:]
    for step in steps:
        for key in ("actor/pg_loss", "actor/kl_loss", "actor/grad_norm", "critic/vf_loss", "critic/grad_norm"):
            assert key in step and step[key] == step[key], (key, step.get(key))  # present and not NaN
        assert step["actor/grad_norm"] > 0 and step["critic/grad_norm"] > 0
