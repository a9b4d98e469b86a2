"""Bad command lines fail in ``prepare_config`` (the driver, before Ray or any worker) with the key named."""

import pytest

from tests.trainer.ppo_e2e_utils import base_overrides, compose_config, make_workspace
from verl.trainer.config import ConfigError
from verl.trainer.main_ppo import prepare_config


@pytest.fixture(scope="module")
def workspace(tmp_path_factory):
    return make_workspace(tmp_path_factory.mktemp("bad_inputs"))


BAD = [
    (["data.train_files=/nonexistent/train.parquet"], "data.train_files"),
    (["data.val_files=/nonexistent/val.parquet"], "data.val_files"),
    (["actor_rollout_ref.model.path=/nonexistent/model"], "actor_rollout_ref.model.path"),
    (["algorithm.adv_estimator=grpo_passk", "actor_rollout_ref.rollout.n=1"], "actor_rollout_ref.rollout.n > 1"),
    (["algorithm.adv_estimator=not_an_estimator"], "algorithm.adv_estimator"),
    (["data.train_batch_size=3"], "train_batch_size"),
    (["actor_rollout_ref.actor.ppo_mini_batch_size=3"], "ppo_mini_batch_size"),
    (["actor_rollout_ref.actor.ppo_micro_batch_size=2"], "ppo_micro_batch_size"),
    (["actor_rollout_ref.rollout.name=not_an_engine"], "actor_rollout_ref.rollout.name"),
    (["trainer.device=tpu"], "trainer.device"),
    (["trainer.device=cuda"], "trainer.device"),
    (["actor_rollout_ref.actor.loss_agg_mode=sum-everything"], "loss_agg_mode"),
    (["trainer.logger=['console','not_a_tracker']"], "trainer.logger"),
    (["actor_rollout_ref.actor.strategy=deepspeed"], "actor_rollout_ref.actor.strategy"),
    (
        ["actor_rollout_ref.actor.strategy=megatron", "+actor_rollout_ref.actor.megatron.context_parallel_size=2"],
        "actor_rollout_ref.actor.megatron.context_parallel_size=2",
    ),
    (["actor_rollout_ref.rollout.name=sglang"], "actor_rollout_ref.rollout.name='sglang': the SGLang rollout"),
    (["algorithm.adv_estimator=gae", "critic.model.path=/nonexistent/critic"], "critic.model.path"),
]


@pytest.mark.parametrize("overrides,key", BAD, ids=[b[1] + ":" + b[0][-1].split("=")[1][:20] for b in BAD])
def test_bad_input_names_the_key(workspace, overrides, key):
    config = compose_config(base_overrides(workspace) + overrides)
    with pytest.raises(ConfigError) as info:
        prepare_config(config)
    assert key in str(info.value), str(info.value)


def test_good_config_passes(workspace):
    config = compose_config(base_overrides(workspace))
    prepare_config(config)
    assert config.trainer.device == "cpu"
