"""Tests for verl.workers.config.batch_sizes: per-rank batch sizes derived from the global config values."""

import pytest
from omegaconf import OmegaConf

from verl.trainer.config import ConfigError
from verl.workers.config.batch_sizes import (
    data_parallel_size,
    normalize_actor_batch_sizes,
    normalize_critic_batch_sizes,
    normalize_reward_model_micro_batch_size,
)


def _actor_cfg(**actor):
    base = {
        "actor": {
            "ppo_mini_batch_size": 16,
            "ppo_micro_batch_size": None,
            "ppo_micro_batch_size_per_gpu": 4,
            "ulysses_sequence_parallel_size": 2,
            "use_dynamic_bsz": False,
        },
        "rollout": {"n": 4, "log_prob_micro_batch_size": 8, "log_prob_micro_batch_size_per_gpu": None},
        "ref": {"log_prob_micro_batch_size": None, "log_prob_micro_batch_size_per_gpu": 3},
    }
    base["actor"].update(actor)
    return OmegaConf.create(base)


def test_actor_sizes_by_hand():
    # 8 workers, sp=2 -> dp=4; mini = 16 prompts * 4 samples / 4 = 16 per rank; 16 / 4 = 4 accumulation steps.
    sizes = normalize_actor_batch_sizes(_actor_cfg(), world_size=8)
    assert sizes.dp_size == 4
    assert sizes.ppo_mini_batch_size == 16
    assert sizes.ppo_micro_batch_size_per_gpu == 4
    assert sizes.gradient_accumulation == 4
    assert sizes.rollout_log_prob_micro_batch_size_per_gpu == 2  # deprecated global 8 / dp 4
    assert sizes.ref_log_prob_micro_batch_size_per_gpu == 3


def test_actor_apply_to_writes_per_rank_values():
    cfg = _actor_cfg(ppo_micro_batch_size=8, ppo_micro_batch_size_per_gpu=None)
    sizes = normalize_actor_batch_sizes(cfg, world_size=8)
    sizes.apply_to(cfg)
    assert cfg.actor.ppo_mini_batch_size == 16
    assert cfg.actor.ppo_micro_batch_size == 2 and cfg.actor.ppo_micro_batch_size_per_gpu == 2
    assert cfg.rollout.log_prob_micro_batch_size_per_gpu == 2
    assert cfg.ref.log_prob_micro_batch_size_per_gpu == 3


def test_actor_errors_name_the_key():
    with pytest.raises(ConfigError, match="ppo_micro_batch_size_per_gpu=3 must divide"):
        normalize_actor_batch_sizes(_actor_cfg(ppo_micro_batch_size_per_gpu=3), world_size=8)
    with pytest.raises(ConfigError, match="ppo_mini_batch_size=1 with rollout.n=4"):
        normalize_actor_batch_sizes(_actor_cfg(ppo_mini_batch_size=1, ulysses_sequence_parallel_size=1), world_size=8)
    with pytest.raises(ConfigError, match="ulysses_sequence_parallel_size=3 must divide"):
        normalize_actor_batch_sizes(_actor_cfg(ulysses_sequence_parallel_size=3), world_size=8)
    # Dynamic batch size: micro sizes are not used, so no divisibility requirement.
    sizes = normalize_actor_batch_sizes(_actor_cfg(ppo_micro_batch_size_per_gpu=3, use_dynamic_bsz=True), 8)
    assert sizes.gradient_accumulation is None


def test_critic_sizes_and_reward_model():
    critic = OmegaConf.create(
        {
            "rollout_n": 2,
            "ppo_mini_batch_size": 8,
            "ppo_micro_batch_size": None,
            "ppo_micro_batch_size_per_gpu": 2,
            "forward_micro_batch_size": 16,
            "forward_micro_batch_size_per_gpu": None,
            "ulysses_sequence_parallel_size": 1,
            "use_dynamic_bsz": False,
        }
    )
    sizes = normalize_critic_batch_sizes(critic, world_size=4)
    assert (sizes.ppo_mini_batch_size, sizes.gradient_accumulation, sizes.forward_micro_batch_size_per_gpu) == (4, 2, 4)
    sizes.apply_to(critic)
    assert critic.forward_micro_batch_size == 4 and critic.ppo_mini_batch_size == 4
    rm = OmegaConf.create({"micro_batch_size": 16, "micro_batch_size_per_gpu": None})
    assert normalize_reward_model_micro_batch_size(rm, world_size=8) == 2
    with pytest.raises(ConfigError, match="reward_model.micro_batch_size=4 is smaller"):
        normalize_reward_model_micro_batch_size(OmegaConf.create({"micro_batch_size": 4}), world_size=8)


def test_data_parallel_size():
    assert data_parallel_size(8, 2) == 4
    with pytest.raises(ConfigError):
        data_parallel_size(8, 0)


def test_megatron_dp_counts_the_ranks_that_share_rows():
    # 8 workers, megatron tp=2 x expert parallel 2 (the Megatron engine's expert-parallel peers run the same rows,
    # each holding other experts) -> dp=2; mini = 16 prompts * 4 samples / 2 = 32 per rank
    cfg = _actor_cfg(strategy="megatron", ulysses_sequence_parallel_size=1)
    cfg.actor.megatron = {"tensor_model_parallel_size": 2, "expert_model_parallel_size": 2}
    sizes = normalize_actor_batch_sizes(cfg, world_size=8)
    assert sizes.dp_size == 2 and sizes.ppo_mini_batch_size == 32
    cfg.actor.megatron.expert_model_parallel_size = 1
    assert normalize_actor_batch_sizes(cfg, world_size=8).dp_size == 4
