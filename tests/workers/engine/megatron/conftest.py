"""Fixtures shared by the Megatron engine tests."""

from __future__ import annotations

import pytest


@pytest.fixture(scope="module")
def models(tmp_path_factory) -> dict[str, str]:
    """Tiny Qwen2 folders for every role: ``actor`` (causal LM), ``critic`` (token classification, ``score`` with
    bias) and ``rm`` (sequence classification), each with its own random weights; built once per test module."""
    from verl.demo.tiny_model import make_tiny_model_dir

    root = tmp_path_factory.mktemp("megatron_roles")
    return {
        "actor": make_tiny_model_dir(str(root / "actor")),
        "critic": make_tiny_model_dir(str(root / "critic"), head="token_classification", seed=1),
        "rm": make_tiny_model_dir(str(root / "rm"), head="sequence_classification", seed=2),
    }
