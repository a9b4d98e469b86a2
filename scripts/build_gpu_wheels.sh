#!/usr/bin/env bash
# Build the wheel folder that scripts/gpu_check.sh installs on a GPU machine without network access.
#
#   scripts/build_gpu_wheels.sh [OUT_DIR=gpu_wheels] [PYTHON_VERSION=3.12]
#
# The GPU machine has torch (CUDA), transformers, peft, accelerate, pandas, pyarrow, tensorboard and pytest, but
# not the pure-Python packages below. Ray is not shipped (its wheel alone is larger than what may travel): the
# trainer, the workers and the SFT trainer import without it and run through the in-process worker group or
# torchrun. The versions are the ones installed here (the ones the CPU suite passes with), for the target Python.
# The folder plus the git-tracked working tree must stay under 64 MiB (the limit on what travels to the machine).
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
OUT="${1:-$ROOT/gpu_wheels}"
PYVER="${2:-3.12}"
PY="${PYTHON:-python}"
LIMIT_BYTES=$((64 * 1024 * 1024))

# what gpu_check.sh asks pip for (pip takes their dependencies from the folder or from what is installed)
TOP_LEVEL=(hydra-core omegaconf tensordict torchdata datasets codetiming dill pydantic megatron-core)
# everything of their dependency trees that a machine with the packages above may lack
# (megatron-core, 2.6 MB, needs only torch, numpy and packaging>=24.2 besides: gpu_check.sh --part megatron)
DEPENDENCIES=(antlr4-python3-runtime pyvers cloudpickle multiprocess xxhash pydantic-core annotated-types typing-inspection
    packaging)
# installed there (seen 2026-11-27: pyarrow 25.0.1, fsspec 2026.7.0), but maybe outside what datasets needs
# (pyarrow>=24, fsspec<=2026.9): pip takes them from the folder only then, and they are dropped first for size
FALLBACKS=(pyarrow fsspec)

version_of() {
    "$PY" -c "import importlib.metadata as m, sys; print(m.version(sys.argv[1]))" "$1"
}

mkdir -p "$OUT"
rm -f "$OUT"/*.whl
pinned=()
for pkg in "${TOP_LEVEL[@]}" "${DEPENDENCIES[@]}" "${FALLBACKS[@]}"; do
    [[ "$pkg" == antlr4-python3-runtime ]] && continue  # published as an sdist only: built below
    pinned+=("$pkg==$(version_of "$pkg")")
done
echo "downloading for Python $PYVER: ${pinned[*]}"
"$PY" -m pip download --quiet --no-deps --only-binary=:all: --dest "$OUT" \
    --python-version "$PYVER" --implementation cp \
    --platform manylinux2014_x86_64 --platform manylinux_2_17_x86_64 --platform manylinux_2_28_x86_64 \
    "${pinned[@]}"
# omegaconf 2.3 needs antlr4 4.9.*, which PyPI has as an sdist only; it is pure Python, so build it here
"$PY" -m pip wheel --quiet --no-deps --wheel-dir "$OUT" "antlr4-python3-runtime==$(version_of antlr4-python3-runtime)"
# the project itself (installed with --no-deps: its Ray requirement cannot be met there)
"$PY" -m pip wheel --quiet --no-deps --no-build-isolation --wheel-dir "$OUT" "$ROOT"

printf '%s\n' "${TOP_LEVEL[@]}" >"$OUT/gpu-requirements.txt"

folder_bytes() { du -cb "$OUT"/* | tail -1 | cut -f1; }
tree_bytes=$(cd "$ROOT" && git ls-files -z | xargs -0 du -cb 2>/dev/null | awk '$2 == "total" {s += $1} END {print s}')
if (($(folder_bytes) + tree_bytes > LIMIT_BYTES)); then
    # the fallbacks are only needed where the machine's own copy is too old: drop them before failing
    for pkg in "${FALLBACKS[@]}"; do rm -f "$OUT/${pkg//-/_}"-*.whl; done
    echo "WARNING: over 64 MiB with ${FALLBACKS[*]}; left out (the GPU machine's own copy must do)" >&2
fi
wheels_bytes=$(folder_bytes)
total=$((wheels_bytes + tree_bytes))
ls -l "$OUT"
echo "wheels: $wheels_bytes bytes; tracked tree: $tree_bytes bytes; together $total of $LIMIT_BYTES allowed"
if ((total > LIMIT_BYTES)); then
    echo "ERROR: the wheel folder and the tree exceed 64 MiB; drop a wheel or shrink the tree" >&2
    exit 1
fi
