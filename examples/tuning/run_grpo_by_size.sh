#!/usr/bin/env bash
# GRPO on GSM8K with the memory/throughput settings for one model size (docs: examples/tuning/README.md).
#   bash examples/tuning/run_grpo_by_size.sh <size> [extra key=value overrides]
# size: cpu-135m (runs on a 2-core CPU box), 0.5b, 1.5b, 3b, 7b, 14b, 32b (GPU: H100/H200 80-141 GB).
# DRY_RUN=1 prints the overrides instead of training.
# Data: python3 examples/data_preprocess/gsm8k.py --local_dir ~/data/gsm8k
set -euo pipefail
size=${1:?usage: run_grpo_by_size.sh <cpu-135m|0.5b|1.5b|3b|7b|14b|32b> [overrides]}
shift

# per size: model, devices per node, nodes, rollout TP, vLLM memory share, micro batch per device, token budget
# per device (dynamic batch size), actor parameter/optimizer offload, reference offload
case "$size" in
  cpu-135m) model=HuggingFaceTB/SmolLM2-135M-Instruct gpus=1 nodes=1 tp=1 mem=0.3 micro=4 tokens=4096 offload=False ref_offload=False ;;
  0.5b) model=Qwen/Qwen2.5-0.5B-Instruct gpus=1 nodes=1 tp=1 mem=0.5 micro=16 tokens=24576 offload=False ref_offload=False ;;
  1.5b) model=Qwen/Qwen2.5-1.5B-Instruct gpus=1 nodes=1 tp=1 mem=0.4 micro=8 tokens=16384 offload=False ref_offload=True ;;
  3b) model=Qwen/Qwen2.5-3B-Instruct gpus=2 nodes=1 tp=1 mem=0.4 micro=8 tokens=16384 offload=False ref_offload=True ;;
  7b) model=Qwen/Qwen2.5-7B-Instruct gpus=4 nodes=1 tp=2 mem=0.4 micro=4 tokens=12288 offload=True ref_offload=True ;;
  14b) model=Qwen/Qwen2.5-14B-Instruct gpus=8 nodes=1 tp=4 mem=0.4 micro=2 tokens=8192 offload=True ref_offload=True ;;
  32b) model=Qwen/Qwen2.5-32B-Instruct gpus=8 nodes=2 tp=8 mem=0.45 micro=1 tokens=6144 offload=True ref_offload=True ;;
  *) echo "unknown size '$size'" >&2; exit 2 ;;
esac

if [ "$size" = cpu-135m ]; then
  # CPU: one worker uses every core (bench_vs_trl: faster and smaller than two on 2 cores); fp32 rollout without
  # native bf16; short responses so a step takes tens of seconds
  device_args=(trainer.device=cpu actor_rollout_ref.rollout.dtype=float32 data.train_batch_size=8
    data.max_response_length=128 actor_rollout_ref.actor.ppo_mini_batch_size=8 actor_rollout_ref.rollout.n=4)
else
  device_args=(trainer.device=cuda data.train_batch_size=512 data.max_response_length=1024
    actor_rollout_ref.actor.ppo_mini_batch_size=128 actor_rollout_ref.rollout.n=5)
fi

args=(
  algorithm.adv_estimator=grpo
  data.train_files=$HOME/data/gsm8k/train.parquet
  data.val_files=$HOME/data/gsm8k/test.parquet
  data.max_prompt_length=512
  data.filter_overlong_prompts=True
  actor_rollout_ref.model.path=$model
  actor_rollout_ref.model.use_remove_padding=True
  actor_rollout_ref.model.enable_gradient_checkpointing=True
  actor_rollout_ref.actor.optim.lr=1e-6
  actor_rollout_ref.actor.use_dynamic_bsz=True
  actor_rollout_ref.actor.ppo_max_token_len_per_gpu=$tokens
  actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu=$micro
  actor_rollout_ref.actor.use_kl_loss=True
  actor_rollout_ref.actor.kl_loss_coef=0.001
  actor_rollout_ref.actor.fsdp_config.param_offload=$offload
  actor_rollout_ref.actor.fsdp_config.optimizer_offload=$offload
  actor_rollout_ref.rollout.name=vllm
  actor_rollout_ref.rollout.tensor_model_parallel_size=$tp
  actor_rollout_ref.rollout.gpu_memory_utilization=$mem
  actor_rollout_ref.rollout.log_prob_micro_batch_size_per_gpu=$micro
  actor_rollout_ref.ref.log_prob_micro_batch_size_per_gpu=$micro
  actor_rollout_ref.ref.fsdp_config.param_offload=$ref_offload
  trainer.logger=['console']
  trainer.project_name=verl_tuning
  trainer.experiment_name=grpo_$size
  trainer.n_gpus_per_node=$gpus
  trainer.nnodes=$nodes
  trainer.test_freq=10
  trainer.total_epochs=15
  "${device_args[@]}"
)

if [ "${DRY_RUN:-0}" = 1 ]; then
  printf '%s\n' "${args[@]}" "$@"
  exit 0
fi
python3 -m verl.trainer.main_ppo "${args[@]}" "$@"
