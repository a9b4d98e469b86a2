#!/usr/bin/env bash
# Evaluate a reasoning model the way DeepSeek-R1 reports it: 8 samples per problem at temperature 0.6, top-p 0.95,
# long responses; main_eval prints test_score (mean score), pass@1 and pass@8 per data source.
# Data: python3 recipe/r1/data_process.py --local_dataset_path <math500.jsonl> <gpqa.csv> --tasks math gpqa
# Extra key=value overrides are appended to main_generation, e.g. trainer.n_gpus_per_node=1, or on CPU
# trainer.device=cpu rollout.name=hf (see examples/generation/run_arithmetic_cpu.sh for a CPU-sized run).
set -xeu

MODEL_PATH=${MODEL_PATH:-deepseek-ai/DeepSeek-R1-Distill-Qwen-1.5B}
DATA_PATH=${DATA_PATH:-$HOME/data/r1/test.parquet}
OUTPUT_PATH=${OUTPUT_PATH:-$HOME/data/r1/test-output-8.parquet}
RECIPE_DIR=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)

python3 -m verl.trainer.main_generation \
    trainer.nnodes=1 \
    trainer.n_gpus_per_node=8 \
    data.path=$DATA_PATH \
    data.prompt_key=prompt \
    data.batch_size=1024 \
    data.n_samples=8 \
    data.output_path=$OUTPUT_PATH \
    model.path=$MODEL_PATH \
    rollout.name=vllm \
    rollout.temperature=0.6 \
    rollout.top_p=0.95 \
    rollout.top_k=-1 \
    rollout.prompt_length=1024 \
    rollout.response_length=32768 \
    rollout.tensor_model_parallel_size=1 \
    rollout.gpu_memory_utilization=0.9 \
    rollout.max_num_batched_tokens=65536 "$@"

python3 -m verl.trainer.main_eval \
    data.path=$OUTPUT_PATH \
    data.response_key=responses \
    data.data_source_key=data_source \
    data.reward_model_key=reward_model \
    custom_reward_function.path=$RECIPE_DIR/reward_score.py \
    custom_reward_function.name=compute_score
