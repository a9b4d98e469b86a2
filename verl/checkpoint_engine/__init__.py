"""Checkpoint engines: the trainer's weights sent to rollout workers on resources of their own, in versioned
buckets (``actor_rollout_ref.rollout.checkpoint_engine``). See :mod:`verl.checkpoint_engine.base`."""

from verl.checkpoint_engine.base import (
    CheckpointEngine,
    SyncStats,
    build_checkpoint_engine,
    get_checkpoint_engine_cls,
    register_checkpoint_engine,
    resolve_backend,
)
from verl.checkpoint_engine.collective import CollectiveCheckpointEngine
from verl.checkpoint_engine.local import LocalCheckpointEngine

__all__ = [
    "CheckpointEngine",
    "CollectiveCheckpointEngine",
    "LocalCheckpointEngine",
    "SyncStats",
    "build_checkpoint_engine",
    "get_checkpoint_engine_cls",
    "register_checkpoint_engine",
    "resolve_backend",
]
