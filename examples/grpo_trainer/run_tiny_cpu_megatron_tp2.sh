#!/usr/bin/env bash
# GRPO on the Megatron-core engine (verl's ppo_megatron_trainer config), scaled down to a CPU box: the built-in
# arithmetic task and 1M-parameter Qwen2 (4 heads, 2 key-value heads), actor and reference split over 2 worker
# processes by tensor parallelism (gloo), sequence parallelism and the distributed optimizer on as in verl's YAML.
# Each step the rollout (HF here; vllm works too) receives the full weights gathered layer by layer from the shards.
# Needs the megatron extra: pip install -e ".[megatron]". Extra key=value overrides are appended, e.g.
# actor_rollout_ref.actor.megatron.tensor_model_parallel_size=1 actor_rollout_ref.actor.megatron.pipeline_model_parallel_size=2
set -x

python3 -m verl.trainer.main_ppo --config-name ppo_megatron_trainer \
    algorithm.adv_estimator=grpo \
    data.train_files=builtin://arithmetic/train.parquet \
    data.val_files=builtin://arithmetic/test.parquet \
    data.train_batch_size=32 \
    data.max_prompt_length=32 \
    data.max_response_length=8 \
    actor_rollout_ref.model.path=builtin://default_model \
    actor_rollout_ref.actor.optim.lr=1e-4 \
    actor_rollout_ref.actor.ppo_mini_batch_size=32 \
    actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu=64 \
    actor_rollout_ref.actor.use_kl_loss=True \
    actor_rollout_ref.actor.kl_loss_coef=0.001 \
    actor_rollout_ref.actor.megatron.tensor_model_parallel_size=2 \
    actor_rollout_ref.ref.log_prob_micro_batch_size_per_gpu=64 \
    actor_rollout_ref.rollout.name=hf \
    actor_rollout_ref.rollout.tensor_model_parallel_size=1 \
    actor_rollout_ref.rollout.n=8 \
    actor_rollout_ref.rollout.log_prob_micro_batch_size_per_gpu=64 \
    algorithm.use_kl_in_reward=False \
    trainer.device=cpu \
    trainer.logger=['console'] \
    trainer.project_name=verl_examples_arithmetic \
    trainer.experiment_name=tiny_megatron_tp2 \
    trainer.n_gpus_per_node=2 \
    trainer.nnodes=1 \
    trainer.save_freq=-1 \
    trainer.test_freq=5 \
    trainer.total_training_steps=60 "$@"
