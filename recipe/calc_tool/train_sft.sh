#!/usr/bin/env bash
# Stage 1: multi-turn SFT of the tiny model on the tool-calling corpus, on CPU (one torchrun process, gloo).
#   bash recipe/calc_tool/train_sft.sh <init_model_dir> <data_dir> <save_dir> [extra key=value overrides]
# Writes <save_dir>/global_step_<SFT_STEPS> (a Hugging Face model folder with the compact chat template).
set -euo pipefail

INIT_MODEL=$1
DATA_DIR=$2
SAVE_DIR=$3
shift 3
SFT_STEPS=${SFT_STEPS:-600}
HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)

CUDA_VISIBLE_DEVICES="" TOKENIZERS_PARALLELISM=false \
python -m torch.distributed.run --standalone --nproc_per_node=1 -m verl.trainer.fsdp_sft_trainer \
    data.train_files="$DATA_DIR/sft_train.parquet" \
    data.val_files="$DATA_DIR/sft_test.parquet" \
    data.multiturn.enable=True \
    data.multiturn.messages_key=messages \
    data.multiturn.tools_key=tools \
    data.custom_cls.path="$HERE/sft_dataset.py" \
    data.custom_cls.name=CalcToolSFTDataset \
    data.max_length=176 \
    data.train_batch_size=32 \
    data.micro_batch_size_per_gpu=32 \
    model.partial_pretrain="$INIT_MODEL" \
    model.enable_gradient_checkpointing=False \
    model.strategy=fsdp2 \
    optim.lr=3e-3 \
    optim.warmup_steps_ratio=0.05 \
    optim.lr_scheduler=wsd \
    trainer.total_training_steps="$SFT_STEPS" \
    trainer.total_epochs=100 \
    trainer.test_freq="$SFT_STEPS" \
    trainer.default_local_dir="$SAVE_DIR" \
    trainer.project_name=calc_tool \
    trainer.experiment_name=sft \
    trainer.logger="['console']" \
    trainer.n_gpus_per_node=1 \
    "$@"
