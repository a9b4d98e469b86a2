"""Trainer-side checkpointing: ``global_step_N/{actor,critic,data.pt}`` published atomically, and resume.

A step is written into a staging folder by every worker and the driver, then renamed into place; only then does
``latest_checkpointed_iteration.txt`` name it. A run killed during a save therefore resumes from the previous
complete checkpoint.
"""

from __future__ import annotations

import logging
import os

import torch

logger = logging.getLogger(__name__)

_STEP_PREFIX = "global_step_"


class CheckpointMixin:
    """``_save_checkpoint`` / ``_load_checkpoint`` for :class:`RayPPOTrainer`."""

    def _checkpoint_root(self) -> str:
        return os.path.abspath(self.config.trainer.default_local_dir)

    def _keep_counts(self) -> tuple[int | None, int | None]:
        trainer = self.config.trainer
        if trainer.get("remove_previous_ckpt_in_save", False):
            logger.warning("trainer.remove_previous_ckpt_in_save is deprecated; use max_actor/critic_ckpt_to_keep")
            return 1, 1
        return trainer.get("max_actor_ckpt_to_keep", None), trainer.get("max_critic_ckpt_to_keep", None)

    def _save_checkpoint(self) -> None:
        """Save actor, critic and dataloader state for ``global_steps`` and publish them as one checkpoint."""
        from verl.utils.checkpoint.checkpoint_manager import (
            publish_checkpoint,
            remove_old_checkpoints,
            remove_stale_staging,
            staging_dir,
            write_tracker,
        )

        root = self._checkpoint_root()
        step = self.global_steps
        remove_stale_staging(root)  # leftovers of a save that was killed
        final = os.path.join(root, f"{_STEP_PREFIX}{step}")
        staging = staging_dir(final)
        hdfs_root = self.config.trainer.get("default_hdfs_dir", None)

        def remote(role):
            return None if hdfs_root is None else os.path.join(hdfs_root, f"{_STEP_PREFIX}{step}", role)

        # the workers' own rotation is off (None): old checkpoints go only after the new one is published
        self.actor_rollout_wg.save_checkpoint(os.path.join(staging, "actor"), remote("actor"), step, None)
        if self.use_critic:
            self.critic_wg.save_checkpoint(os.path.join(staging, "critic"), remote("critic"), step, None)
        torch.save(self.train_dataloader.state_dict(), os.path.join(staging, "data.pt"))
        publish_checkpoint(staging, final, metadata={"global_step": step})
        write_tracker(root, step)
        keep_actor, keep_critic = self._keep_counts()
        remove_old_checkpoints(root, keep_actor, subdir="actor")
        if self.use_critic:
            remove_old_checkpoints(root, keep_critic, subdir="critic")

    def _load_checkpoint(self) -> int:
        """Resume from the latest (or the named) checkpoint; returns the restored global step (0: from scratch)."""
        from verl.utils.checkpoint.checkpoint_manager import find_latest_ckpt_path, is_complete_checkpoint

        trainer = self.config.trainer
        mode = trainer.get("resume_mode", "auto")
        if mode == "disable":
            return 0
        if trainer.get("default_hdfs_dir", None) is not None:
            raise NotImplementedError("trainer.default_hdfs_dir is set: resuming from HDFS is not supported")
        if mode == "auto":
            folder = find_latest_ckpt_path(self._checkpoint_root())
            if folder is None:
                logger.warning("no checkpoint under %s: training from scratch", self._checkpoint_root())
                return 0
        elif mode == "resume_path":
            folder = trainer.get("resume_from_path", None)
            assert isinstance(folder, str) and _STEP_PREFIX in folder, (
                f"trainer.resume_from_path must be a path containing '{_STEP_PREFIX}', got {folder!r}"
            )
            folder = os.path.abspath(folder)
            if not os.path.isdir(folder):
                raise FileNotFoundError(f"trainer.resume_from_path={folder} does not exist")
            if not is_complete_checkpoint(folder):
                logger.warning("%s was never published as a complete checkpoint; resuming from it anyway", folder)
        else:
            raise ValueError(f"trainer.resume_mode={mode!r}; expected auto, resume_path or disable")
        self.global_steps = int(folder.rstrip("/").split(_STEP_PREFIX)[-1])
        logger.warning("resuming from %s (global step %d)", folder, self.global_steps)
        delete_after = trainer.get("del_local_ckpt_after_load", False)
        self.actor_rollout_wg.load_checkpoint(os.path.join(folder, "actor"), del_local_after_load=delete_after)
        if self.use_critic:
            self.critic_wg.load_checkpoint(os.path.join(folder, "critic"), del_local_after_load=delete_after)
        data_path = os.path.join(folder, "data.pt")
        if os.path.exists(data_path):
            self.train_dataloader.load_state_dict(torch.load(data_path, weights_only=False))
        else:
            logger.warning("%s not found: the dataloader starts from the beginning", data_path)
        return self.global_steps
