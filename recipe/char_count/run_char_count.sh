#!/usr/bin/env bash
# The whole char_count tutorial on CPU: data, a tiny random model, SFT, then GRPO (see README.md).
#   bash recipe/char_count/run_char_count.sh            # everything under ~/char_count (override with WORK=...)
#   SFT_STEPS=100 bash recipe/char_count/run_char_count.sh trainer.total_training_steps=5   # a quicker look
# Extra arguments are Hydra overrides for the GRPO stage.
set -euo pipefail

WORK=${WORK:-$HOME/char_count}
export SFT_STEPS=${SFT_STEPS:-1000}
HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)

python -m recipe.char_count.create_dataset --local_dir "$WORK/data"
python -m recipe.char_count.init_model --out "$WORK/init"
bash "$HERE/train_sft.sh" "$WORK/init" "$WORK/data" "$WORK/sft"
bash "$HERE/train_grpo.sh" "$WORK/sft/global_step_$SFT_STEPS" "$WORK/data" \
    trainer.default_local_dir="$WORK/grpo" "$@"
