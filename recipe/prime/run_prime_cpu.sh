#!/usr/bin/env bash
# PRIME scaled down to CPU: the built-in arithmetic task and model (nothing downloaded), 2 worker processes,
# HF rollout, the PRM starting from the policy's weights. A few minutes on 2 cores.
# Extra key=value overrides are appended, e.g. trainer.total_training_steps=4.
set -x

python3 -m recipe.prime.main_prime \
    data.train_files=builtin://arithmetic/train.parquet \
    data.val_files=builtin://arithmetic/test.parquet \
    actor_rollout_ref.model.path=builtin://default_model \
    data.train_batch_size=8 \
    data.oversample_factor=2 \
    data.max_prompt_length=32 \
    data.max_response_length=8 \
    data.filter_truncate=False \
    actor_rollout_ref.actor.optim.lr=1e-5 \
    actor_rollout_ref.actor.ppo_mini_batch_size=8 \
    actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu=8 \
    actor_rollout_ref.rollout.name=hf \
    actor_rollout_ref.rollout.tensor_model_parallel_size=1 \
    actor_rollout_ref.rollout.n=4 \
    actor_rollout_ref.rollout.log_prob_micro_batch_size_per_gpu=16 \
    reward_model.micro_batch_size_per_gpu=16 \
    reward_model.model.optim.lr=1e-5 \
    reward_model.mini_batch_size=8 \
    trainer.device=cpu \
    trainer.logger=['console'] \
    trainer.project_name=prime_example \
    trainer.experiment_name=builtin_arithmetic_cpu \
    trainer.n_gpus_per_node=2 \
    trainer.nnodes=1 \
    trainer.save_freq=-1 \
    trainer.test_freq=10 \
    trainer.total_training_steps=20 "$@"
