#!/usr/bin/env bash
# The whole calc_tool recipe on CPU: data, a tiny random model, multi-turn SFT, then multi-turn GRPO with the
# calculator tool (see README.md).
#   bash recipe/calc_tool/run_calc_tool.sh            # everything under ~/calc_tool (override with WORK=...)
#   SFT_STEPS=100 bash recipe/calc_tool/run_calc_tool.sh trainer.total_training_steps=5   # a quicker look
# Extra arguments are Hydra overrides for the GRPO stage.
set -euo pipefail

WORK=${WORK:-$HOME/calc_tool}
export SFT_STEPS=${SFT_STEPS:-600}
HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
cd "$HERE/../.."

python -m recipe.calc_tool.create_dataset --local_dir "$WORK/data"
python -m recipe.calc_tool.init_model --out "$WORK/init"
bash "$HERE/train_sft.sh" "$WORK/init" "$WORK/data" "$WORK/sft"
bash "$HERE/train_grpo.sh" "$WORK/sft/global_step_$SFT_STEPS" "$WORK/data" \
    trainer.default_local_dir="$WORK/grpo" "$@"
