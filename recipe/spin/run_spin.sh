#!/usr/bin/env bash
# SPIN (online DPO, reference refreshed from the actor every step) on the built-in arithmetic task, on CPU.
# Scaled down from verl's recipe/spin/run_spin.sh (GSM8K, Qwen2.5, 4 GPUs): the same keys, the shipped 1M-parameter
# model and data (builtin://), 2 CPU worker processes, the HF rollout. For GSM8K on GPUs, override data.*_files,
# actor_rollout_ref.model.path, trainer.device=cuda, trainer.n_gpus_per_node and actor_rollout_ref.rollout.name=vllm.
# Extra key=value overrides are appended.
set -x

python3 -m recipe.spin.main_spin \
    data.train_files=builtin://arithmetic/train.parquet \
    data.val_files=builtin://arithmetic/test.parquet \
    data.train_batch_size=32 \
    data.max_prompt_length=32 \
    data.max_response_length=8 \
    actor_rollout_ref.model.path=builtin://default_model \
    actor_rollout_ref.actor.optim.lr=1e-4 \
    actor_rollout_ref.actor.ppo_mini_batch_size=32 \
    actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu=64 \
    actor_rollout_ref.actor.dpo_beta=0.1 \
    actor_rollout_ref.rollout.name=hf \
    actor_rollout_ref.rollout.tensor_model_parallel_size=1 \
    actor_rollout_ref.rollout.n=8 \
    actor_rollout_ref.rollout.log_prob_micro_batch_size_per_gpu=64 \
    actor_rollout_ref.ref.log_prob_micro_batch_size_per_gpu=64 \
    algorithm.pair_selection.strategy=best_worst \
    trainer.logger=['console'] \
    trainer.device=cpu \
    trainer.n_gpus_per_node=2 \
    trainer.nnodes=1 \
    trainer.val_before_train=True \
    trainer.save_freq=-1 \
    trainer.test_freq=5 \
    trainer.ref_update_freq=1 \
    trainer.total_training_steps=30 "$@"
