#!/usr/bin/env bash
# DAPO scaled down to the built-in task (the shipped ~1M-parameter model learning two-number addition) on CPU:
# two Ray workers, HF rollout, minutes. Same keys as run_dapo_qwen2.5_0.5b.sh.
# The arithmetic scorer returns one number per response, so groups are filtered on seq_reward.
# Extra key=value overrides are appended, e.g. trainer.total_training_steps=2.
set -xeuo pipefail

max_response_length=8
train_prompt_bsz=32
n_resp_per_prompt=8

python3 -m recipe.dapo.main_dapo \
    data.train_files=builtin://arithmetic/train.parquet \
    data.val_files=builtin://arithmetic/test.parquet \
    data.max_prompt_length=32 \
    actor_rollout_ref.model.path=builtin://default_model \
    actor_rollout_ref.actor.optim.lr=1e-4 \
    actor_rollout_ref.actor.ppo_mini_batch_size=32 \
    actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu=64 \
    actor_rollout_ref.rollout.log_prob_micro_batch_size_per_gpu=64 \
    data.max_response_length=${max_response_length} \
    data.train_batch_size=${train_prompt_bsz} \
    data.gen_batch_size=$((train_prompt_bsz * 3 / 2)) \
    actor_rollout_ref.rollout.n=${n_resp_per_prompt} \
    algorithm.adv_estimator=grpo \
    algorithm.use_kl_in_reward=False \
    actor_rollout_ref.actor.use_kl_loss=False \
    actor_rollout_ref.actor.clip_ratio_low=0.2 \
    actor_rollout_ref.actor.clip_ratio_high=0.28 \
    actor_rollout_ref.actor.clip_ratio_c=10.0 \
    actor_rollout_ref.actor.loss_agg_mode=token-mean \
    algorithm.filter_groups.enable=True \
    algorithm.filter_groups.metric=seq_reward \
    algorithm.filter_groups.max_num_gen_batches=10 \
    reward_model.reward_manager=dapo \
    reward_model.overlong_buffer.enable=True \
    reward_model.overlong_buffer.len=2 \
    reward_model.overlong_buffer.penalty_factor=0.5 \
    actor_rollout_ref.rollout.name=hf \
    actor_rollout_ref.rollout.tensor_model_parallel_size=1 \
    trainer.device=cpu \
    trainer.n_gpus_per_node=2 \
    trainer.logger=['console'] \
    trainer.project_name=verl-dapo \
    trainer.experiment_name=arithmetic_dapo \
    trainer.total_training_steps=30 \
    trainer.test_freq=5 \
    trainer.save_freq=-1 "$@"
