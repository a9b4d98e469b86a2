#!/usr/bin/env bash
# GRPO on the built-in arithmetic task with a hybrid reward: the built-in rule (weight 1) plus a tiny generative judge
# (weight 0.5) that the trainer serves behind an OpenAI-style router on 127.0.0.1 and that judge_reward.py (a
# verl-style async reward function) calls through reward_router_address. CPU only, nothing downloaded.
# Metrics per step: reward/rule/mean and reward/judge/mean (each source), critic/score/mean (the combined reward).
# The judge has random weights (make_judge.py): its grades are noise; the example shows the plumbing.
set -xeuo pipefail
HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
JUDGE=${JUDGE:-/tmp/verl_tiny_judge}
python3 "$HERE/make_judge.py" "$JUDGE"

python3 -m verl.trainer.main_ppo \
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
    actor_rollout_ref.rollout.name=hf \
    actor_rollout_ref.rollout.n=8 \
    actor_rollout_ref.rollout.tensor_model_parallel_size=1 \
    actor_rollout_ref.rollout.log_prob_micro_batch_size_per_gpu=64 \
    actor_rollout_ref.ref.log_prob_micro_batch_size_per_gpu=64 \
    reward_model.use_reward_loop=True \
    reward_model.enable=True \
    reward_model.model.path=$JUDGE \
    reward_model.rollout.name=hf \
    reward_model.rollout.tensor_model_parallel_size=1 \
    reward_model.rollout.dtype=float32 \
    reward_model.rollout.response_length=8 \
    "reward_model.reward_sources=[{name:rule,weight:1.0},{name:judge,weight:0.5,path:$HERE/judge_reward.py}]" \
    trainer.device=cpu \
    trainer.n_gpus_per_node=2 \
    trainer.nnodes=1 \
    trainer.logger=['console'] \
    trainer.total_training_steps=${STEPS:-10} \
    trainer.test_freq=5 \
    trainer.project_name=verl_examples \
    trainer.experiment_name=arithmetic_judge_hybrid "$@"
