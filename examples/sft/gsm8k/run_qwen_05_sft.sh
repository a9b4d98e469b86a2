#!/usr/bin/env bash
# SFT of Qwen2.5-0.5B-Instruct on GSM8K (prompt = extra_info.question, response = extra_info.answer of the RL files
# written by examples/data_preprocess/gsm8k.py).
#   bash examples/sft/gsm8k/run_qwen_05_sft.sh <nproc_per_node> <save_path> [key=value overrides...]
# CPU-only machines run the same command over gloo (use a small nproc_per_node and add e.g. trainer.total_training_steps=20).
set -xeuo pipefail

if [ "$#" -lt 2 ]; then
    echo "Usage: run_qwen_05_sft.sh <nproc_per_node> <save_path> [other_configs...]"
    exit 1
fi

nproc_per_node=$1
save_path=$2
shift 2

torchrun --standalone --nnodes=1 --nproc_per_node="$nproc_per_node" \
    -m verl.trainer.fsdp_sft_trainer \
    data.train_files="$HOME/data/gsm8k/train.parquet" \
    data.val_files="$HOME/data/gsm8k/test.parquet" \
    data.prompt_key=extra_info \
    data.response_key=extra_info \
    data.prompt_dict_keys=['question'] \
    data.response_dict_keys=['answer'] \
    data.micro_batch_size_per_gpu=4 \
    model.partial_pretrain=Qwen/Qwen2.5-0.5B-Instruct \
    trainer.default_local_dir="$save_path" \
    trainer.project_name=gsm8k-sft \
    trainer.experiment_name=gsm8k-sft-qwen-2.5-0.5b-instruct \
    trainer.total_epochs=4 \
    trainer.logger=['console'] "$@"
