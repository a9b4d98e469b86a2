#!/usr/bin/env bash
# Sample 4 responses per GSM8K test question with Qwen2.5-0.5B-Instruct on one GPU, then score them.
# Data: python3 examples/data_preprocess/gsm8k.py --local_dir ~/data/gsm8k
# Extra key=value overrides are appended to main_generation, e.g. trainer.n_gpus_per_node=8.
set -xeu

OUTPUT_PATH=${OUTPUT_PATH:-$HOME/data/gsm8k/test-qwen2.5-0.5b-gen.parquet}

python3 -m verl.trainer.main_generation \
    trainer.nnodes=1 \
    trainer.n_gpus_per_node=1 \
    data.path=$HOME/data/gsm8k/test.parquet \
    data.prompt_key=prompt \
    data.n_samples=4 \
    data.batch_size=256 \
    data.output_path=$OUTPUT_PATH \
    model.path=Qwen/Qwen2.5-0.5B-Instruct \
    rollout.name=vllm \
    rollout.temperature=1.0 \
    rollout.top_k=-1 \
    rollout.top_p=1.0 \
    rollout.prompt_length=512 \
    rollout.response_length=512 \
    rollout.tensor_model_parallel_size=1 \
    rollout.gpu_memory_utilization=0.8 "$@"

# openai/gsm8k rows are scored by the built-in gsm8k rule (no custom_reward_function needed)
python3 -m verl.trainer.main_eval data.path=$OUTPUT_PATH
