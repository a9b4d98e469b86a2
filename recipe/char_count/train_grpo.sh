#!/usr/bin/env bash
# Stage 2: GRPO from the SFT model with the recipe's own reward function, on CPU (2 worker processes, HF rollout).
#   bash recipe/char_count/train_grpo.sh <sft_model_dir> <data_dir> [extra key=value overrides]
set -euo pipefail

SFT_MODEL=$1
DATA_DIR=$2
shift 2
HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)

python -m verl.trainer.main_ppo \
    algorithm.adv_estimator=grpo \
    data.train_files="$DATA_DIR/train.parquet" \
    data.val_files="$DATA_DIR/test.parquet" \
    data.train_batch_size=32 \
    data.max_prompt_length=48 \
    data.max_response_length=4 \
    actor_rollout_ref.model.path="$SFT_MODEL" \
    actor_rollout_ref.actor.optim.lr=3e-4 \
    actor_rollout_ref.actor.ppo_mini_batch_size=32 \
    actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu=64 \
    actor_rollout_ref.actor.use_kl_loss=False \
    actor_rollout_ref.actor.entropy_coeff=0 \
    actor_rollout_ref.rollout.name=hf \
    actor_rollout_ref.rollout.tensor_model_parallel_size=1 \
    actor_rollout_ref.rollout.n=8 \
    actor_rollout_ref.rollout.temperature=1.0 \
    actor_rollout_ref.rollout.log_prob_micro_batch_size_per_gpu=64 \
    custom_reward_function.path="$HERE/reward_function.py" \
    custom_reward_function.name=char_count_reward_function \
    trainer.device=cpu \
    trainer.n_gpus_per_node=2 \
    trainer.nnodes=1 \
    trainer.logger="['console']" \
    trainer.project_name=char_count \
    trainer.experiment_name=grpo \
    trainer.val_before_train=True \
    trainer.test_freq=10 \
    trainer.save_freq=-1 \
    trainer.total_training_steps=40 \
    "$@"
