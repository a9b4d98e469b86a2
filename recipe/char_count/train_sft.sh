#!/usr/bin/env bash
# Stage 1: supervised fine-tuning of a tiny model on the char_count corpus, on CPU (one torchrun process, gloo).
#   bash recipe/char_count/train_sft.sh <init_model_dir> <data_dir> <save_dir> [extra key=value overrides]
# Writes <save_dir>/global_step_<SFT_STEPS> (a Hugging Face model folder).
set -euo pipefail

INIT_MODEL=$1
DATA_DIR=$2
SAVE_DIR=$3
shift 3
SFT_STEPS=${SFT_STEPS:-1000}

CUDA_VISIBLE_DEVICES="" TOKENIZERS_PARALLELISM=false \
python -m torch.distributed.run --standalone --nproc_per_node=1 -m verl.trainer.fsdp_sft_trainer \
    data.train_files="$DATA_DIR/sft_train.parquet" \
    data.val_files="$DATA_DIR/sft_test.parquet" \
    data.prompt_key=prompt \
    data.response_key=response \
    data.max_length=48 \
    data.train_batch_size=64 \
    data.micro_batch_size_per_gpu=64 \
    model.partial_pretrain="$INIT_MODEL" \
    model.enable_gradient_checkpointing=False \
    model.strategy=fsdp2 \
    optim.lr=2e-3 \
    optim.warmup_steps_ratio=0.05 \
    optim.lr_scheduler=wsd \
    trainer.total_training_steps="$SFT_STEPS" \
    trainer.total_epochs=100 \
    trainer.test_freq="$SFT_STEPS" \
    trainer.default_local_dir="$SAVE_DIR" \
    trainer.project_name=char_count \
    trainer.experiment_name=sft \
    trainer.logger="['console']" \
    trainer.n_gpus_per_node=1 \
    "$@"
