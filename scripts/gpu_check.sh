#!/usr/bin/env bash
# Check the CUDA paths on one GPU, from the repository root of a checkout:
#
#   scripts/gpu_check.sh WHEEL_DIR [--part install|env|tests|megatron|bench|all]   # on the GPU machine
#   scripts/gpu_check.sh --cpu-smoke [WHEEL_DIR] [--part ...]              # the same steps on CPU, tiny shapes
#
# WHEEL_DIR comes from scripts/build_gpu_wheels.sh: the pure-Python packages the GPU machine lacks (hydra-core,
# omegaconf, tensordict, torchdata, datasets, ...) and the project's own wheel; they are installed with
# `pip install --no-index --find-links WHEEL_DIR` (no network), the project with --no-deps (no Ray there).
# Then, on the GPU (parts, so that each fits a 10-minute call):
#   env    versions, the accelerator, and the import of trainer, workers and SFT trainer without Ray;
#   tests  the *_on_gpu.py files (or those in GPU_TESTS): FSDP2 and FSDP1 actor updates in bf16 against fp32 on
#          CPU, parameter and optimizer offload round trips, checkpoint save/resume, the SFT trainer under torchrun
#          (NCCL), 20 GRPO steps of the built-in task through the in-process worker group with the HF rollout;
#          none may skip;
#   megatron  tests/workers/engine/megatron/test_megatron_model_on_gpu.py: the Megatron model (local layer spec, tensor
#          and pipeline parallel 1) against transformers on the GPU, logits and gradients in fp32 (must run: no skip);
#          then the TransformerEngine layer spec's logits where TransformerEngine is installed (skipped otherwise);
#   bench  scripts/benchmark/bench_gpu_throughput.py: tokens/s, MFU and peak memory of generation, log-probs and
#          update on a random model of Qwen2.5-0.5B's shape (JSON lines, also written to $OUT/bench.jsonl).
# Logs go to ${OUT:-gpu_check_out}. --cpu-smoke hides the GPUs and runs the tests with VERL_GPU_CHECK_DEVICE=cpu
# (fewer steps, FSDP1 skipped) and the benchmark with --tiny; without WHEEL_DIR it installs nothing.
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
PY="${PYTHON:-python}"
OUT_DIR="${OUT:-$ROOT/gpu_check_out}"
smoke=0
wheels=""
part="all"
while (($#)); do
    case "$1" in
        --cpu-smoke) smoke=1 ;;
        --part) part="$2"; shift ;;
        -h|--help) sed -n '2,22p' "$0"; exit 0 ;;
        *) wheels="$1" ;;
    esac
    shift
done
if ((!smoke)) && [[ -z "$wheels" ]]; then
    echo "usage: $0 WHEEL_DIR [--part install|env|tests|megatron|bench|all] | $0 --cpu-smoke [WHEEL_DIR]" >&2
    exit 2
fi
case "$part" in
    install|env|tests|megatron|bench|all) ;;
    *) echo "unknown --part '$part': expected install, env, tests, megatron, bench or all" >&2; exit 2 ;;
esac
mkdir -p "$OUT_DIR"
cd "$ROOT"
export PYTHONPATH="$ROOT${PYTHONPATH:+:$PYTHONPATH}" TOKENIZERS_PARALLELISM=false
if ((smoke)); then
    export CUDA_VISIBLE_DEVICES="" VERL_GPU_CHECK_DEVICE=cpu
fi
want() { [[ "$part" == all || "$part" == "$1" ]]; }
step() { echo; echo "=== $* ($(date -u +%H:%M:%S))"; }

if [[ -n "$wheels" ]] && want install; then
    step "install the wheels in $wheels"
    "$PY" -m pip install --no-index --find-links "$wheels" -r "$wheels/gpu-requirements.txt"
    "$PY" -m pip install --no-index --no-deps --force-reinstall "$wheels"/verl-*.whl
fi

if want env; then
    step "environment"
    "$PY" - <<'EOF'
import importlib.metadata as md
import sys

import torch

print("python", sys.version.split()[0], "| torch", torch.__version__, "| cuda", torch.version.cuda)
if torch.cuda.is_available():
    print("device", torch.cuda.get_device_name(), "| bf16", torch.cuda.is_bf16_supported())
for name in ("transformers", "peft", "accelerate", "tensordict", "datasets", "hydra-core", "pyarrow", "flash-attn"):
    try:
        print(f"{name} {md.version(name)}")
    except md.PackageNotFoundError:
        print(f"{name} (not installed)")

import verl.trainer.fsdp_sft_trainer  # noqa: E402,F401
import verl.trainer.main_ppo  # noqa: E402,F401
import verl.trainer.ppo.ray_trainer  # noqa: E402,F401
import verl.workers.fsdp_workers  # noqa: E402,F401

assert "ray" not in sys.modules, "importing the trainer, the workers or the SFT trainer imported Ray"
print("trainer, workers and SFT trainer import without Ray")
EOF
    if command -v nvidia-smi >/dev/null && ((!smoke)); then nvidia-smi; fi
fi

if want tests; then
    step "GPU tests (*_on_gpu.py)"
    log="$OUT_DIR/tests.log"
    set +e
    # GPU_TESTS narrows the run (e.g. one file per call where the whole set would pass a call's time limit)
    read -r -a files <<<"${GPU_TESTS:-tests/workers/test_fsdp_workers_on_gpu.py tests/trainer/test_sft_torchrun_on_gpu.py tests/trainer/test_grpo_inprocess_on_gpu.py}"
    "$PY" -m pytest -rs -p no:cacheprovider -o addopts="" "${files[@]}" 2>&1 | tee "$log"
    status=${PIPESTATUS[0]}
    set -e
    if ((status != 0)); then
        echo "GPU tests FAILED (see $log)" >&2
        exit "$status"
    fi
    if ((!smoke)) && grep -q "skipped" <(tail -n 3 "$log"); then
        echo "GPU tests skipped on the GPU machine: the checks did not run (see $log)" >&2
        exit 1
    fi
fi

if want megatron; then
    step "Megatron model on one device (local layer spec; TransformerEngine spec where installed)"
    log="$OUT_DIR/megatron.log"
    megatron_tests=tests/workers/engine/megatron/test_megatron_model_on_gpu.py
    set +e
    "$PY" -m pytest -rs -s -p no:cacheprovider -o addopts="" "$megatron_tests" 2>&1 | tee "$log"
    status=${PIPESTATUS[0]}
    set -e
    if ((status != 0)); then
        echo "Megatron check FAILED (see $log)" >&2
        exit "$status"
    fi
    # the local-spec case must have run (megatron-core installed, the accelerator seen); TransformerEngine may be absent
    if ! grep -qE "[1-9][0-9]* passed" <(tail -n 3 "$log"); then
        echo "the Megatron local-spec check did not run (see $log: megatron-core missing from the wheels?)" >&2
        exit 1
    fi
fi

if want bench; then
    step "throughput benchmark"
    bench_args=()
    if ((smoke)); then bench_args=(--tiny --device cpu); fi
    "$PY" scripts/benchmark/bench_gpu_throughput.py "${bench_args[@]}" | tee "$OUT_DIR/bench.jsonl"
fi
step "gpu_check passed (smoke=$smoke, part=$part)"
