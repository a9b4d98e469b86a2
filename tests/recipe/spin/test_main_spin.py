"""``python -m recipe.spin.main_spin``: bad SPIN keys are refused before Ray starts; a 2-step run on 2 CPU workers."""

import math
import os
import subprocess
import sys

import pytest

from recipe.spin.main_spin import prepare_spin_config
from tests.recipe.spin.spin_test_utils import compose_spin_config, spin_overrides
from tests.trainer.ppo_e2e_utils import parse_console_metrics
from verl.trainer.config import ConfigError
from verl.trainer.report.run_report import load_history

BAD = [
    (["actor_rollout_ref.actor.dpo_beta=abc"], "actor_rollout_ref.actor.dpo_beta='abc'"),
    (["actor_rollout_ref.actor.dpo_beta=0"], "actor_rollout_ref.actor.dpo_beta=0"),
    (["actor_rollout_ref.actor.dpo_loss_type=hinge"], "actor_rollout_ref.actor.dpo_loss_type='hinge'"),
    (["actor_rollout_ref.actor.dpo_label_smoothing=0.7"], "actor_rollout_ref.actor.dpo_label_smoothing=0.7"),
    (["trainer.ref_update_freq=1.5"], "trainer.ref_update_freq=1.5"),
    (["algorithm.pair_selection.strategy=random"], "algorithm.pair_selection.strategy='random'"),
    (["algorithm.pair_selection.min_score_gap=-1"], "algorithm.pair_selection.min_score_gap=-1"),
    (["algorithm.pair_selection=best_worst"], "algorithm.pair_selection='best_worst'"),
    (["actor_rollout_ref.actor.use_kl_loss=True"], "actor_rollout_ref.actor.use_kl_loss"),
    (["algorithm.adv_estimator=gae"], "algorithm.adv_estimator"),
    (["actor_rollout_ref.model.lora_rank=8"], "actor_rollout_ref.model.lora_rank"),
]


@pytest.mark.parametrize("overrides,message", BAD, ids=[b[0][0] for b in BAD])
def test_bad_spin_key_is_refused_naming_it(workspace, overrides, message):
    config = compose_spin_config(spin_overrides(workspace) + overrides)
    with pytest.raises(ConfigError) as info:
        prepare_spin_config(config)
    assert message in str(info.value), str(info.value)


def test_good_spin_config_passes(workspace):
    config = compose_spin_config(spin_overrides(workspace))
    prepare_spin_config(config)
    assert config.trainer.ref_update_freq == 1 and config.actor_rollout_ref.actor.dpo_beta == 0.1


@pytest.mark.slow
@pytest.mark.timeout(600)
def test_main_spin_two_steps_on_two_workers(workspace, tmp_path):
    run_dir = tmp_path / "run"
    env = dict(os.environ, VERL_LOGGING_LEVEL="WARNING", RAY_DEDUP_LOGS="0", TOKENIZERS_PARALLELISM="false")
    env.pop("RAY_ADDRESS", None)  # a local cluster of its own (main_ppo joins the cluster RAY_ADDRESS names)
    result = subprocess.run(
        [
            sys.executable,
            "-m",
            "recipe.spin.main_spin",
            *spin_overrides(workspace),
            f"trainer.default_local_dir={run_dir}",
        ],
        cwd=str(tmp_path),
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert result.returncode == 0, result.stderr[-4000:]
    console = [s for s in parse_console_metrics(result.stdout) if "actor/dpo_loss" in s]
    assert [int(s["step"]) for s in console] == [1, 2], result.stdout[-3000:]
    records = load_history(str(run_dir / "metrics.jsonl"))  # full precision (the console prints 3 decimals)
    steps = [r["metrics"] for r in records if r["kind"] == "train"]
    assert len(steps) == 2
    for s in steps:
        assert s["spin/num_pairs"] > 0 and s["actor/grad_norm"] > 0 and 0 <= s["critic/score/mean"] <= 1
        # ref_update_freq=1: each step starts with the reference equal to the actor (the initial model at step 1,
        # the refreshed copy of the step-1 actor at step 2, across both FSDP shards), so the DPO logits are 0
        assert s["actor/dpo_loss"] == pytest.approx(math.log(2), abs=1e-5)
        assert s["actor/rewards_margins"] == pytest.approx(0.0, abs=1e-5)
