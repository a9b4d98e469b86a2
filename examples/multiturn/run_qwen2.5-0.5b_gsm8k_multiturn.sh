#!/usr/bin/env bash
# Multi-turn GRPO on GSM8K with a tool: the model may call calc_gsm8k_reward to check its answer before it ends the
# conversation (verl's GSM8K tool recipe). Data, from a local copy of GSM8K:
#   python3 examples/data_preprocess/gsm8k_multiturn_w_tool.py --local_dataset_path <gsm8k dir> --local_dir ~/data/gsm8k
# Add actor_rollout_ref.rollout.multi_turn.interaction_config_path=examples/multiturn/config/interaction_config/gsm8k_interaction_config.yaml
# for the GSM8K interaction (a simulated user that says whether the answer is right). On CPU append
# trainer.device=cpu actor_rollout_ref.rollout.name=hf (or run run_tiny_cpu_gsm8k_multiturn.sh).
set -x

CONFIG_DIR=$(cd "$(dirname "$0")" && pwd)/config

python3 -m verl.trainer.main_ppo \
    algorithm.adv_estimator=grpo \
    data.train_files=$HOME/data/gsm8k/train.parquet \
    data.val_files=$HOME/data/gsm8k/test.parquet \
    data.train_batch_size=256 \
    data.max_prompt_length=1024 \
    data.max_response_length=1024 \
    data.filter_overlong_prompts=True \
    data.truncation=error \
    data.return_raw_chat=True \
    actor_rollout_ref.model.path=Qwen/Qwen2.5-0.5B-Instruct \
    actor_rollout_ref.model.use_remove_padding=True \
    actor_rollout_ref.model.enable_gradient_checkpointing=True \
    actor_rollout_ref.actor.optim.lr=1e-6 \
    actor_rollout_ref.actor.ppo_mini_batch_size=64 \
    actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu=8 \
    actor_rollout_ref.actor.use_kl_loss=True \
    actor_rollout_ref.actor.kl_loss_coef=0.001 \
    actor_rollout_ref.actor.kl_loss_type=low_var_kl \
    actor_rollout_ref.rollout.name=vllm \
    actor_rollout_ref.rollout.tensor_model_parallel_size=1 \
    actor_rollout_ref.rollout.gpu_memory_utilization=0.5 \
    actor_rollout_ref.rollout.log_prob_micro_batch_size_per_gpu=16 \
    actor_rollout_ref.rollout.n=8 \
    actor_rollout_ref.rollout.multi_turn.enable=True \
    actor_rollout_ref.rollout.multi_turn.max_assistant_turns=5 \
    actor_rollout_ref.rollout.multi_turn.tool_config_path=$CONFIG_DIR/tool_config/gsm8k_tool_config.yaml \
    actor_rollout_ref.ref.log_prob_micro_batch_size_per_gpu=16 \
    algorithm.use_kl_in_reward=False \
    trainer.critic_warmup=0 \
    trainer.logger=['console'] \
    trainer.project_name=gsm8k_multiturn \
    trainer.experiment_name=qwen2.5_0.5b_gsm8k_tool \
    trainer.n_gpus_per_node=1 \
    trainer.nnodes=1 \
    trainer.save_freq=-1 \
    trainer.test_freq=20 \
    trainer.total_epochs=15 "$@"
