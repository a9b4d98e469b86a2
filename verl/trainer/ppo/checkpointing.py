"""Trainer-side checkpointing: ``global_step_N/{actor,critic,data.pt}`` published atomically, and resume.

A step is written into a staging folder by every worker and the driver, then renamed into place; only then does
``latest_checkpointed_iteration.txt`` name it. A run killed during a save therefore resumes from the previous
complete checkpoint.
"""

from __future__ import annotations

import logging
import os
import shutil

import torch

from verl.single_controller.base.watchdog import WorkerGroupTimeout, WorkerLostError
from verl.trainer.config import TrainerConfig

logger = logging.getLogger(__name__)

_STEP_PREFIX = "global_step_"


def _root_cause(error: BaseException) -> BaseException:
    """The worker's own exception behind a Ray task error (``RayTaskError.cause``), else ``error`` itself."""
    cause = getattr(error, "cause", None)
    return cause if isinstance(cause, BaseException) else error


class CheckpointSaveError(RuntimeError):
    """A checkpoint save failed; earlier checkpoints and the tracker are as they were before it started."""

    def __init__(self, step: int, path: str, root: str, error: BaseException) -> None:
        from verl.utils.checkpoint.checkpoint_manager import read_tracker

        cause = _root_cause(error)
        detail = str(cause).strip().splitlines()
        tracked = read_tracker(root)
        latest = f"{_STEP_PREFIX}{tracked}" if tracked is not None else "none"
        super().__init__(
            f"saving the checkpoint of step {step} to {path} failed: {type(cause).__name__}: "
            f"{detail[-1] if detail else ''}. Earlier checkpoints and {root}/latest_checkpointed_iteration.txt are "
            f"unchanged (latest: {latest}); free space or fix the permissions of trainer.default_local_dir, then "
            "resume with trainer.resume_mode=auto"
        )
        self.step, self.path, self.cause = step, path, cause


class TrainerCheckpointer:
    """Saves and restores the trainer's state (actor, critic, dataloader) under ``trainer.default_local_dir``."""

    def __init__(self, trainer_config: TrainerConfig) -> None:
        self.config = trainer_config
        self.root = os.path.abspath(trainer_config.default_local_dir)

    def step_folder(self, step: int) -> str:
        """The published checkpoint folder of ``step`` (``<default_local_dir>/global_step_<step>``)."""
        return os.path.join(self.root, f"{_STEP_PREFIX}{step}")

    def _keep_counts(self) -> tuple[int | None, int | None]:
        if self.config.remove_previous_ckpt_in_save:
            logger.warning("trainer.remove_previous_ckpt_in_save is deprecated; use max_actor/critic_ckpt_to_keep")
            return 1, 1
        return self.config.max_actor_ckpt_to_keep, self.config.max_critic_ckpt_to_keep

    def save(self, step: int, actor_rollout_wg, critic_wg, train_dataloader, extra_groups: dict | None = None) -> None:
        """Save actor, critic (if any), ``extra_groups`` (``{folder name: worker group}``, a recipe's own trained
        models) and dataloader state for ``step`` and publish them as one checkpoint."""
        from verl.utils.checkpoint.checkpoint_manager import (
            publish_checkpoint,
            remove_old_checkpoints,
            remove_stale_staging,
            staging_dir,
            write_tracker,
        )

        final = self.step_folder(step)
        try:
            remove_stale_staging(self.root)  # leftovers of a save that was killed
            staging = staging_dir(final)
        except OSError as e:
            raise CheckpointSaveError(step, final, self.root, e) from e
        hdfs_root = self.config.default_hdfs_dir

        def remote(role):
            return None if hdfs_root is None else os.path.join(hdfs_root, f"{_STEP_PREFIX}{step}", role)

        try:
            # the workers' own rotation is off (None): old checkpoints go only after the new one is published
            actor_rollout_wg.save_checkpoint(os.path.join(staging, "actor"), remote("actor"), step, None)
            if critic_wg is not None:
                critic_wg.save_checkpoint(os.path.join(staging, "critic"), remote("critic"), step, None)
            for name, group in (extra_groups or {}).items():
                group.save_checkpoint(os.path.join(staging, name), remote(name), step, None)
            torch.save(train_dataloader.state_dict(), os.path.join(staging, "data.pt"))
            publish_checkpoint(staging, final, metadata={"global_step": step})
            write_tracker(self.root, step)
        except (WorkerLostError, WorkerGroupTimeout):  # a dead or hung worker, not the disk: its own report says so
            shutil.rmtree(staging, ignore_errors=True)
            raise
        except Exception as e:
            shutil.rmtree(staging, ignore_errors=True)
            raise CheckpointSaveError(step, final, self.root, e) from e
        keep_actor, keep_critic = self._keep_counts()
        try:
            remove_old_checkpoints(self.root, keep_actor, subdir="actor")
            if critic_wg is not None:
                remove_old_checkpoints(self.root, keep_critic, subdir="critic")
        except OSError as e:  # the new checkpoint is whole and tracked: a failed clean-up loses nothing
            logger.warning("checkpoint %s saved, but removing older checkpoints failed: %s", final, e)

    def _resume_folder(self) -> str | None:
        """The checkpoint folder ``trainer.resume_mode`` selects, or None to start from scratch.

        ``auto`` verifies the tracked checkpoint (manifest, shard set, readable files) and falls back to the newest
        whole one with a warning naming the bad file; a tracker with no whole checkpoint behind it is an error (a
        fresh start would silently redo the run). ``resume_path`` to a damaged checkpoint is an error naming the file.
        """
        from verl.utils.checkpoint.checkpoint_manager import (
            find_resumable_ckpt_path,
            is_complete_checkpoint,
            read_tracker,
        )
        from verl.utils.checkpoint.integrity import verify_checkpoint

        mode = self.config.resume_mode
        if mode == "disable":
            return None
        if self.config.default_hdfs_dir is not None:
            raise NotImplementedError("trainer.default_hdfs_dir is set: resuming from HDFS is not supported")
        if mode == "auto":
            folder = find_resumable_ckpt_path(self.root)
            tracked = read_tracker(self.root)
            tracked_dir = None if tracked is None else os.path.join(self.root, f"{_STEP_PREFIX}{tracked}")
            if folder is None and tracked_dir is not None and os.path.isdir(tracked_dir):
                raise RuntimeError(
                    f"trainer.resume_mode=auto: no checkpoint under {self.root} up to the tracked step {tracked} is "
                    "whole (see the warnings above for the damaged files); restore one, pass another with "
                    "trainer.resume_mode=resume_path, or start afresh with trainer.resume_mode=disable"
                )
            if folder is None:
                logger.warning("no checkpoint under %s: training from scratch", self.root)
            return folder
        if mode != "resume_path":
            raise ValueError(f"trainer.resume_mode={mode!r}; expected auto, resume_path or disable")
        folder = self.config.resume_from_path
        assert isinstance(folder, str) and _STEP_PREFIX in folder, (
            f"trainer.resume_from_path must be a path containing '{_STEP_PREFIX}', got {folder!r}"
        )
        folder = os.path.abspath(folder)
        if not os.path.isdir(folder):
            raise FileNotFoundError(f"trainer.resume_from_path={folder} does not exist")
        if not is_complete_checkpoint(folder):
            logger.warning("%s was never published as a complete checkpoint; resuming from it anyway", folder)
        verify_checkpoint(folder)  # CheckpointDamagedError names the bad file
        return folder

    def load(self, actor_rollout_wg, critic_wg, train_dataloader, extra_groups: dict | None = None) -> int:
        """Resume from the latest (or the named) checkpoint; returns the restored global step (0: from scratch).

        ``extra_groups`` (``{folder name: worker group}``) are restored from their folders, which must exist.
        """
        folder = self._resume_folder()
        if folder is None:
            return 0
        step = int(folder.rstrip("/").split(_STEP_PREFIX)[-1])
        logger.warning("resuming from %s (global step %d)", folder, step)
        delete_after = self.config.del_local_ckpt_after_load
        actor_rollout_wg.load_checkpoint(os.path.join(folder, "actor"), del_local_after_load=delete_after)
        if critic_wg is not None:
            critic_wg.load_checkpoint(os.path.join(folder, "critic"), del_local_after_load=delete_after)
        for name, group in (extra_groups or {}).items():
            part = os.path.join(folder, name)
            if not os.path.isdir(part):
                raise FileNotFoundError(f"{part} is missing: the checkpoint {folder} was not saved by this trainer")
            group.load_checkpoint(part, del_local_after_load=delete_after)
        data_path = os.path.join(folder, "data.pt")
        if os.path.exists(data_path):
            train_dataloader.load_state_dict(torch.load(data_path, weights_only=False))
        else:
            logger.warning("%s not found: the dataloader starts from the beginning", data_path)
        return step
