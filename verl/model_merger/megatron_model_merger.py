"""Megatron dist-checkpoint merging: not available in this implementation (the Megatron backend is GPU-only)."""

from __future__ import annotations

from verl.model_merger.base_model_merger import BaseModelMerger, ModelMergerConfig

__all__ = ["MegatronModelMerger"]


class MegatronModelMerger(BaseModelMerger):
    """Placeholder for ``--backend megatron``: refuses with a clear message instead of writing a wrong model."""

    def __init__(self, config: ModelMergerConfig):
        raise NotImplementedError(
            f"--backend megatron (local_dir={config.local_dir!r}) is not supported by this model merger; "
            "only FSDP checkpoints (--backend fsdp) can be merged"
        )

    def merge_and_save(self) -> None:
        """Never reached: construction refuses."""
        raise NotImplementedError("--backend megatron is not supported")
