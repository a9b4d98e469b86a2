#!/usr/bin/env bash
# The same keys scaled down to CPU: the built-in arithmetic task and model (no data to prepare, no download),
# 2 worker processes, HF rollout. About 3 minutes on 2 cores. Extra arguments are Hydra overrides.
set -x

python3 -m recipe.sppo.main_sppo \
    data.train_files=builtin://arithmetic/train.parquet \
    data.val_files=builtin://arithmetic/test.parquet \
    data.train_batch_size=32 \
    data.max_prompt_length=32 \
    data.max_response_length=8 \
    data.filter_overlong_prompts=True \
    data.truncation=error \
    actor_rollout_ref.model.path=builtin://default_model \
    actor_rollout_ref.model.use_remove_padding=False \
    actor_rollout_ref.model.enable_gradient_checkpointing=False \
    actor_rollout_ref.actor.optim.lr=1e-4 \
    actor_rollout_ref.actor.ppo_mini_batch_size=32 \
    actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu=64 \
    actor_rollout_ref.actor.sppo_eta=1.0 \
    actor_rollout_ref.rollout.name=hf \
    actor_rollout_ref.rollout.tensor_model_parallel_size=1 \
    actor_rollout_ref.rollout.n=8 \
    actor_rollout_ref.rollout.log_prob_micro_batch_size_per_gpu=64 \
    algorithm.sppo_eta=1.0 \
    algorithm.use_kl_in_reward=False \
    trainer.critic_warmup=0 \
    trainer.logger="['console']" \
    trainer.val_before_train=True \
    trainer.project_name=verl_sppo \
    trainer.experiment_name=arithmetic_sppo_cpu \
    trainer.device=cpu \
    trainer.n_gpus_per_node=2 \
    trainer.nnodes=1 \
    trainer.save_freq=-1 \
    trainer.test_freq=5 \
    trainer.total_training_steps=40 "$@"
