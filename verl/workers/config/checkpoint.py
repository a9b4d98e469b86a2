"""A role's `checkpoint` block: what a checkpoint saves and what a resume loads."""

from __future__ import annotations

from dataclasses import dataclass, field

from verl.utils.config import BaseConfig

__all__ = ["CheckpointConfig"]


@dataclass
class CheckpointConfig(BaseConfig):
    """What a checkpoint saves and what a resume loads: model, optimizer, extra, hf_model."""

    save_contents: list[str] = field(default_factory=lambda: ["model", "optimizer", "extra"])
    load_contents: list[str] = field(default_factory=lambda: ["model", "optimizer", "extra"])
    # verl 0.9's asynchronous save and strict weight export: only their defaults are honoured (checks.unsupported_keys)
    async_save: bool = False
    strict: bool = True
