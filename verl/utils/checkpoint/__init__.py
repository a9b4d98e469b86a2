"""Checkpoint managers (verl's per-rank layout), tracker helpers and atomic checkpoint publishing."""

from verl.utils.checkpoint.checkpoint_manager import (
    BaseCheckpointManager,
    find_latest_ckpt_path,
    find_resumable_ckpt_path,
    get_checkpoint_tracker_filename,
    is_complete_checkpoint,
    publish_checkpoint,
    read_tracker,
    remove_old_checkpoints,
    remove_stale_staging,
    staging_dir,
    write_tracker,
)

__all__ = [
    "BaseCheckpointManager",
    "find_latest_ckpt_path",
    "find_resumable_ckpt_path",
    "get_checkpoint_tracker_filename",
    "is_complete_checkpoint",
    "publish_checkpoint",
    "read_tracker",
    "remove_old_checkpoints",
    "remove_stale_staging",
    "staging_dir",
    "write_tracker",
]
