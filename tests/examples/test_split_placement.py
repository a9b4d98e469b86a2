"""examples/split_placement: actor and critic on separate resource pools, updated concurrently."""

import importlib.util
import os

import pytest
from omegaconf import OmegaConf

from tests.trainer.ppo_e2e_utils import base_overrides, compose_config, make_workspace, parse_console_metrics
from verl.trainer.config import ConfigError
from verl.trainer.ppo.ray_trainer import Role

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
SCRIPT = os.path.join(ROOT, "examples", "split_placement", "main_ppo_split.py")


def _load():
    spec = importlib.util.spec_from_file_location("main_ppo_split", SCRIPT)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


split = _load()


def test_pools_split_each_node_in_half():
    config = OmegaConf.create({"trainer": {"n_gpus_per_node": 4, "nnodes": 2, "device": "cpu"}})
    manager = split.split_resource_pools(config, [Role.ActorRollout, Role.Critic, Role.RefPolicy])
    assert manager.resource_pool_spec == {split.ACTOR_POOL: [2, 2], split.CRITIC_POOL: [2, 2]}
    assert manager.mapping == {
        Role.ActorRollout: split.ACTOR_POOL,
        Role.RefPolicy: split.ACTOR_POOL,
        Role.Critic: split.CRITIC_POOL,
    }


@pytest.mark.parametrize(
    "overrides, message",
    [
        (["algorithm.adv_estimator=grpo"], "algorithm.adv_estimator='grpo'"),
        (["algorithm.adv_estimator=gae", "trainer.n_gpus_per_node=3"], "trainer.n_gpus_per_node=3"),
    ],
)
def test_what_split_placement_cannot_run_is_refused(overrides, message):
    with pytest.raises(ConfigError, match=message):
        split.check_split_config(compose_config(overrides))


def test_ppo_with_the_critic_on_its_own_worker(tmp_path):
    import subprocess
    import sys

    ws = make_workspace(tmp_path)
    overrides = base_overrides(ws, "gae", steps=2) + ["trainer.resume_mode=disable"]
    env = dict(os.environ, VERL_LOGGING_LEVEL="WARNING", TOKENIZERS_PARALLELISM="false")
    result = subprocess.run(
        [sys.executable, SCRIPT, *overrides], cwd=str(tmp_path), env=env, capture_output=True, text=True, timeout=600
    )
    assert result.returncode == 0, result.stderr[-4000:]
    steps = [s for s in parse_console_metrics(result.stdout) if "training/global_step" in s]
    assert [int(s["step"]) for s in steps] == [1, 2]
    # both models were updated in every step: the critic's metrics came back from its own pool's worker
    assert all("critic/vf_loss" in s and "actor/pg_loss" in s for s in steps), steps
