"""``python -m verl.trainer.main_ppo`` end to end on two Ray CPU workers, as a verl user runs it."""

import math
import time

import pytest

from tests.trainer.ppo_e2e_utils import (
    base_overrides,
    make_workspace,
    parse_console_metrics,
    run_main_ppo,
    write_reward_fn,
)

VERL_METRIC_NAMES = [
    "actor/pg_loss",
    "actor/pg_clipfrac",
    "actor/ppo_kl",
    "actor/entropy",
    "actor/kl_loss",
    "actor/grad_norm",
    "actor/lr",
    "critic/score/mean",
    "critic/rewards/mean",
    "critic/advantages/mean",
    "response_length/mean",
    "prompt_length/mean",
    "global_seqlen/mean",
    "timing_s/gen",
    "timing_s/old_log_prob",
    "timing_s/ref",
    "timing_s/update_actor",
    "timing_s/step",
    "perf/throughput",
    "training/global_step",
]


@pytest.fixture(scope="module")
def workspace(tmp_path_factory):
    root = tmp_path_factory.mktemp("ppo_cli")
    ws = make_workspace(root)
    ws["reward"] = write_reward_fn(root)
    return ws


def check_steps(result, n_steps, required):
    assert result.returncode == 0, result.stderr[-4000:]
    steps = [s for s in parse_console_metrics(result.stdout) if "training/global_step" in s]
    assert [int(s["step"]) for s in steps] == list(range(1, n_steps + 1)), result.stdout[-3000:]
    for step in steps:
        missing = [k for k in required if k not in step]
        assert not missing, f"missing metrics {missing}"
        bad = {k: v for k, v in step.items() if not math.isfinite(v)}
        assert not bad, f"non-finite metrics {bad}"
    return steps


@pytest.mark.slow
def test_grpo_cli(workspace):
    overrides = base_overrides(workspace, "grpo", steps=3) + [
        f"custom_reward_function.path={workspace['reward']}",
        "trainer.val_before_train=True",
        "trainer.test_freq=3",
        "trainer.resume_mode=disable",
    ]
    result = run_main_ppo(overrides, cwd=workspace["root"])
    steps = check_steps(result, 3, VERL_METRIC_NAMES)
    assert any(k.startswith("val-core/openai/gsm8k/reward/mean@1") for k in steps[-1])
    # the policy moved: a nonzero gradient was applied and the sampled policy drifted from the reference
    assert any(s["actor/grad_norm"] > 0 for s in steps)


@pytest.mark.slow
def test_ppo_with_critic_cli(workspace):
    overrides = base_overrides(workspace, "gae", steps=2) + [
        f"custom_reward_function.path={workspace['reward']}",
        "actor_rollout_ref.actor.use_kl_loss=False",
        "algorithm.use_kl_in_reward=True",
        "trainer.resume_mode=disable",
    ]
    result = run_main_ppo(overrides, cwd=workspace["root"])
    required = [n for n in VERL_METRIC_NAMES if n != "actor/kl_loss"]
    required += ["critic/vf_loss", "critic/values/mean", "critic/vf_explained_var", "actor/reward_kl_penalty"]
    check_steps(result, 2, required)


@pytest.mark.slow
def test_bad_config_fails_fast_before_ray(workspace):
    overrides = base_overrides(workspace, "grpo") + ["actor_rollout_ref.actor.ppo_mini_batch_size=3"]
    start = time.monotonic()
    result = run_main_ppo(overrides, cwd=workspace["root"], timeout=120)
    elapsed = time.monotonic() - start
    assert result.returncode != 0
    output = result.stdout + result.stderr
    assert "ppo_mini_batch_size" in output and "Started a local Ray instance" not in output
    assert elapsed < 60


@pytest.mark.slow
def test_data_the_filter_empties_stops_before_ray(workspace):
    """Whether any prompt survives data.filter_overlong_prompts needs the tokenizer: the driver builds the datasets
    before it starts Ray, so an emptied training set stops the run there, naming the files and the limit."""
    overrides = base_overrides(workspace, "grpo") + ["data.filter_overlong_prompts=True", "data.max_prompt_length=4"]
    result = run_main_ppo(overrides, cwd=workspace["root"], timeout=120)
    assert result.returncode != 0
    output = result.stdout + result.stderr
    assert "data.filter_overlong_prompts=True dropped all 16 rows" in output and "max_prompt_length=4" in output
    assert "Started a local Ray instance" not in output
