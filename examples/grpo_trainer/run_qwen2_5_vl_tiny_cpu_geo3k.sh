#!/usr/bin/env bash
# GRPO on Geometry3K images with a vision-language policy: verl's Qwen2.5-VL command line, scaled down to a tiny random
# Qwen2.5-VL that this script builds, on CPU with 2 workers and the HF rollout, in a few minutes. Nothing is downloaded.
# The data is a synthetic stand-in in geometry3k's layout (drawn shapes), run through the geo3k preprocessor as a real
# local copy would be: python3 examples/data_preprocess/geo3k.py --local_dataset_path /data/geometry3k
# For the real model: actor_rollout_ref.model.path=Qwen/Qwen2.5-VL-7B-Instruct with the real data, on GPUs.
# Extra key=value overrides are appended, e.g. trainer.total_training_steps=10.
set -euo pipefail
set -x

WORK=${VERL_TINY_GEO3K_DIR:-$HOME/data/tiny_geo3k}
ROOT=$(cd "$(dirname "$0")/../.." && pwd)

python3 -c "
import os, sys
from verl.demo.tiny_vlm import make_tiny_vlm_dir, write_tiny_geometry3k
work = sys.argv[1]
if not os.path.isfile(os.path.join(work, 'model', 'config.json')):
    make_tiny_vlm_dir(os.path.join(work, 'model'))
write_tiny_geometry3k(os.path.join(work, 'raw'), num_train=16, num_test=4)
" "$WORK"
python3 "$ROOT/examples/data_preprocess/geo3k.py" --local_dataset_path "$WORK/raw" --local_dir "$WORK/data"

python3 -m verl.trainer.main_ppo \
    algorithm.adv_estimator=grpo \
    data.train_files=$WORK/data/train.parquet \
    data.val_files=$WORK/data/test.parquet \
    data.train_batch_size=4 \
    data.max_prompt_length=192 \
    data.max_response_length=16 \
    data.filter_overlong_prompts=True \
    data.truncation=error \
    data.image_key=images \
    actor_rollout_ref.model.path=$WORK/model \
    actor_rollout_ref.model.use_remove_padding=True \
    actor_rollout_ref.model.enable_gradient_checkpointing=True \
    actor_rollout_ref.actor.optim.lr=1e-3 \
    actor_rollout_ref.actor.ppo_mini_batch_size=4 \
    actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu=2 \
    actor_rollout_ref.actor.use_kl_loss=True \
    actor_rollout_ref.actor.kl_loss_coef=0.01 \
    actor_rollout_ref.actor.kl_loss_type=low_var_kl \
    actor_rollout_ref.actor.entropy_coeff=0 \
    actor_rollout_ref.rollout.log_prob_micro_batch_size_per_gpu=4 \
    actor_rollout_ref.rollout.tensor_model_parallel_size=1 \
    actor_rollout_ref.rollout.name=hf \
    actor_rollout_ref.rollout.n=2 \
    actor_rollout_ref.ref.log_prob_micro_batch_size_per_gpu=4 \
    algorithm.use_kl_in_reward=False \
    trainer.critic_warmup=0 \
    trainer.logger=['console'] \
    trainer.project_name=verl_examples_geo3k \
    trainer.experiment_name=qwen2_5_vl_tiny_cpu \
    trainer.device=cpu \
    trainer.n_gpus_per_node=2 \
    trainer.nnodes=1 \
    trainer.default_local_dir=$WORK/checkpoints \
    trainer.save_freq=-1 \
    trainer.test_freq=-1 \
    trainer.total_training_steps=2 \
    ray_init.num_cpus=4 "$@"
