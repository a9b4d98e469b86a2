"""Checkpoint managers' base class, the tracker file, and atomic publishing of ``global_step_N`` folders.

Atomic publishing (used by the trainer; the layout itself is verl's):

1. ``staging = staging_dir(final)`` names a hidden sibling ``.global_step_N.staging-<id>`` of ``final``;
   every worker writes its shards below it (``staging/actor``, ``staging/critic``), the trainer writes ``data.pt``.
2. ``publish_checkpoint(staging, final)`` writes the completion marker, holding a manifest of every file (size and
   checksum, :mod:`verl.utils.checkpoint.integrity`), then renames ``staging`` to ``final`` (an atomic exchange when
   ``final`` already exists). A folder named ``global_step_N`` is therefore always whole when written.
3. ``write_tracker(root, step)`` replaces ``latest_checkpointed_iteration.txt`` through a temp file, so the tracker
   only ever names a published checkpoint.
4. ``remove_old_checkpoints(root, keep)`` rotates only after the new checkpoint is published and tracked.

A kill at any point leaves the previous checkpoint and the tracker intact; the leftovers are hidden folders that
``remove_stale_staging(root)`` deletes. A checkpoint damaged after its save (a truncated or rewritten file) is
found by ``find_resumable_ckpt_path``, which verifies the manifest and skips to the newest checkpoint that is whole.
"""

from __future__ import annotations

import ctypes
import json
import logging
import os
import random
import re
import shutil
import tempfile
import time
import uuid
from abc import ABC, abstractmethod

import numpy as np
import torch
import torch.distributed as dist

from verl.utils.checkpoint.integrity import MANIFEST_KEY, build_manifest, checkpoint_problems
from verl.utils.device import get_device_name, get_torch_device, is_accelerator_available

logger = logging.getLogger(__name__)

__all__ = [
    "COMPLETE_MARKER",
    "TRACKER_FILENAME",
    "BaseCheckpointManager",
    "find_latest_ckpt_path",
    "find_resumable_ckpt_path",
    "get_checkpoint_tracker_filename",
    "is_complete_checkpoint",
    "list_checkpoints",
    "publish_checkpoint",
    "read_tracker",
    "remove_old_checkpoints",
    "remove_stale_staging",
    "staging_dir",
    "write_tracker",
]

TRACKER_FILENAME = "latest_checkpointed_iteration.txt"
# Written last into a staging folder, just before it is renamed into place.
COMPLETE_MARKER = "checkpoint_complete.json"
_STAGING_TAG = ".staging-"
_TRASH_TAG = ".deleting-"
_DEFAULT_CONTENTS = ("model", "optimizer", "extra")


# ------------------------------------------------------------------------------------------------------------
# tracker and discovery
# ------------------------------------------------------------------------------------------------------------
def get_checkpoint_tracker_filename(root_path: str) -> str:
    """``{root_path}/latest_checkpointed_iteration.txt``: holds the last published global step."""
    return os.path.join(root_path, TRACKER_FILENAME)


def read_tracker(root_path: str) -> int | None:
    """The step the tracker names, or None when it is missing or unreadable."""
    tracker = get_checkpoint_tracker_filename(root_path)
    if not os.path.isfile(tracker):
        return None
    try:
        with open(tracker) as f:
            return int(f.read().strip())
    except ValueError:
        logger.warning("checkpoint tracker %s does not hold an integer step; ignoring it", tracker)
        return None


def is_complete_checkpoint(path: str) -> bool:
    """Whether ``path`` is a published checkpoint folder (it holds the completion marker written last)."""
    return os.path.isdir(path) and os.path.isfile(os.path.join(path, COMPLETE_MARKER))


def _step_pattern(directory_format: str) -> re.Pattern:
    head, _, tail = directory_format.partition("{}")
    return re.compile("^" + re.escape(head) + r"(\d+)" + re.escape(tail) + "$")


def list_checkpoints(root_path: str, directory_format: str = "global_step_{}") -> list[tuple[int, str]]:
    """``(step, path)`` of every folder in ``root_path`` named by ``directory_format``, oldest first."""
    if not os.path.isdir(root_path):
        return []
    pattern = _step_pattern(directory_format)
    found = []
    for name in os.listdir(root_path):
        match = pattern.match(name)
        path = os.path.join(root_path, name)
        if match and os.path.isdir(path):
            found.append((int(match.group(1)), path))
    return sorted(found)


def _tracked_folder(root_path: str | None, directory_format: str) -> tuple[int, str] | None:
    """``(step, folder)`` the tracker in ``root_path`` names; None (logged) without a tracker or that folder."""
    if root_path is None:
        return None
    step = read_tracker(root_path)
    if step is None:
        logger.info("checkpoint tracker file does not exist: %s", get_checkpoint_tracker_filename(root_path))
        return None
    folder = os.path.join(root_path, directory_format.format(step))
    if not os.path.isdir(folder):
        logger.warning("checkpoint folder %s named by the tracker does not exist", folder)
        return None
    return step, folder


def find_latest_ckpt_path(path: str | None, directory_format: str = "global_step_{}") -> str | None:
    """The folder of the step named by the tracker in ``path``; None when there is no usable checkpoint.

    None if ``path`` is None, the tracker is missing, or the folder it names is missing. If that folder lacks
    the completion marker while others in ``path`` carry one, it is an interrupted save: the newest complete
    folder at or before the tracked step is returned instead. Folders written without markers (verl's
    non-atomic saves) are trusted as the tracker names them.
    """
    tracked = _tracked_folder(path, directory_format)
    if tracked is None:
        return None
    step, folder = tracked
    if is_complete_checkpoint(folder):
        return folder
    complete = [(s, p) for s, p in list_checkpoints(path, directory_format) if is_complete_checkpoint(p)]
    if not complete:
        return folder
    earlier = [p for s, p in complete if s <= step]
    if not earlier:
        logger.warning("checkpoint %s is incomplete and no earlier complete checkpoint exists", folder)
        return None
    logger.warning("checkpoint %s is incomplete; resuming from %s", folder, earlier[-1])
    return earlier[-1]


def find_resumable_ckpt_path(root_path: str | None, directory_format: str = "global_step_{}") -> str | None:
    """The newest checkpoint at or before the tracked step that passes the integrity check; None if there is none.

    The tracked folder is verified first (:func:`verl.utils.checkpoint.integrity.checkpoint_problems`); a damaged
    or unpublished one is skipped with a warning that names the bad file, and older folders are tried in turn.
    Without a tracker, or when the tracked folder does not exist, there is nothing to resume (verl's behaviour).
    """
    tracked = _tracked_folder(root_path, directory_format)
    if tracked is None:
        return None
    step = tracked[0]
    candidates = [p for s, p in list_checkpoints(root_path, directory_format) if s <= step]
    # folders without a marker are verl's (non-atomic) saves: trusted only where no folder carries a marker
    any_marker = any(is_complete_checkpoint(p) for p in candidates)
    for path in reversed(candidates):
        if any_marker and not is_complete_checkpoint(path):
            logger.warning("checkpoint %s was never published (no %s); skipping it", path, COMPLETE_MARKER)
            continue
        problems = checkpoint_problems(path, COMPLETE_MARKER)
        if not problems:
            return path
        bad, reason = problems[0]
        logger.warning("checkpoint %s is damaged, skipping it: %s: %s", path, bad, reason)
    logger.warning("no whole checkpoint at or before step %d under %s", step, root_path)
    return None


# ------------------------------------------------------------------------------------------------------------
# atomic publishing
# ------------------------------------------------------------------------------------------------------------
def _fsync_path(path: str) -> None:
    """Flush a file or a directory entry to disk (best effort: some file systems refuse directory fsync)."""
    try:
        fd = os.open(path, os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError:
        pass
    finally:
        os.close(fd)


def _fsync_tree(root: str) -> None:
    for dirpath, _dirs, files in os.walk(root):
        for name in files:
            _fsync_path(os.path.join(dirpath, name))
        _fsync_path(dirpath)


def staging_dir(final_dir: str, create: bool = True) -> str:
    """A fresh hidden sibling of ``final_dir`` to write a checkpoint into before :func:`publish_checkpoint`.

    Leftover staging folders of the same ``final_dir`` (from a killed save) are removed first.
    """
    final_dir = os.path.abspath(final_dir)
    parent, name = os.path.split(final_dir.rstrip(os.sep))
    os.makedirs(parent, exist_ok=True)
    prefix = f".{name}{_STAGING_TAG}"
    for other in os.listdir(parent):
        if other.startswith(prefix):
            shutil.rmtree(os.path.join(parent, other), ignore_errors=True)
    path = os.path.join(parent, f"{prefix}{uuid.uuid4().hex[:12]}")
    if create:
        os.makedirs(path)
    return path


def _rename_exchange(src: str, dst: str) -> bool:
    """Atomically swap two existing paths (Linux ``renameat2(RENAME_EXCHANGE)``); False where unsupported."""
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        renameat2 = libc.renameat2
    except (OSError, AttributeError):
        return False
    at_fdcwd, rename_exchange = -100, 2
    renameat2.argtypes = [ctypes.c_int, ctypes.c_char_p, ctypes.c_int, ctypes.c_char_p, ctypes.c_uint]
    return renameat2(at_fdcwd, os.fsencode(src), at_fdcwd, os.fsencode(dst), rename_exchange) == 0


def _trash_name(path: str) -> str:
    parent, name = os.path.split(path.rstrip(os.sep))
    return os.path.join(parent, f".{name}{_TRASH_TAG}{uuid.uuid4().hex[:12]}")


def publish_checkpoint(staging: str, final: str, metadata: dict | None = None, fsync: bool = True) -> str:
    """Mark ``staging`` complete and rename it to ``final``; call once every writer has returned.

    An existing ``final`` (a re-saved step) is swapped out atomically where the OS allows and then deleted.
    ``metadata`` goes into the completion marker. Returns the absolute ``final`` path.
    """
    staging, final = os.path.abspath(staging), os.path.abspath(final)
    if not os.path.isdir(staging):
        raise FileNotFoundError(f"publish_checkpoint: staging folder {staging!r} does not exist")
    tmp_marker = os.path.join(staging, COMPLETE_MARKER + ".tmp")
    if fsync:
        # Shards must be on disk before the marker that vouches for them.
        _fsync_tree(staging)
    manifest = build_manifest(staging, skip=(COMPLETE_MARKER, COMPLETE_MARKER + ".tmp"))
    marker = {"published_at": time.time(), **(metadata or {}), MANIFEST_KEY: manifest}
    with open(tmp_marker, "w") as f:
        json.dump(marker, f)
        f.flush()
        if fsync:
            os.fsync(f.fileno())
    os.replace(tmp_marker, os.path.join(staging, COMPLETE_MARKER))
    if os.path.exists(final):
        if _rename_exchange(staging, final):
            shutil.rmtree(staging, ignore_errors=True)
        else:
            # Not atomic: a kill between the two renames leaves no folder under the final name.
            trash = _trash_name(final)
            os.rename(final, trash)
            os.rename(staging, final)
            shutil.rmtree(trash, ignore_errors=True)
    else:
        os.rename(staging, final)
    if fsync:
        _fsync_path(os.path.dirname(final))
    return final


def write_tracker(root_path: str, step: int, fsync: bool = True) -> str:
    """Atomically set ``latest_checkpointed_iteration.txt`` in ``root_path`` to ``step`` (temp file + replace)."""
    if isinstance(step, bool) or not isinstance(step, int | np.integer):
        raise TypeError(f"write_tracker: step={step!r} must be an int global step")
    os.makedirs(root_path, exist_ok=True)
    tracker = get_checkpoint_tracker_filename(root_path)
    fd, tmp = tempfile.mkstemp(prefix=f".{TRACKER_FILENAME}.", suffix=".tmp", dir=root_path)
    try:
        with os.fdopen(fd, "w") as f:
            f.write(str(int(step)))
            f.flush()
            if fsync:
                os.fsync(f.fileno())
        os.replace(tmp, tracker)
    except BaseException:
        if os.path.exists(tmp):
            os.remove(tmp)
        raise
    if fsync:
        _fsync_path(root_path)
    return tracker


def _delete_dir(path: str) -> None:
    """Rename out of the checkpoint namespace first, so a kill mid-delete leaves no half folder behind a valid name."""
    trash = _trash_name(path)
    os.rename(path, trash)
    shutil.rmtree(trash, ignore_errors=True)


def remove_old_checkpoints(
    root_path: str,
    keep: int | None,
    subdir: str | None = None,
    directory_format: str = "global_step_{}",
    role_subdirs: tuple[str, ...] = ("actor", "critic"),
) -> list[str]:
    """Keep the newest ``keep`` checkpoints (and the tracked one); delete older ones. Returns what was deleted.

    ``keep`` None or < 1 keeps everything. With ``subdir`` (``"actor"`` for ``max_actor_ckpt_to_keep``) only that
    part of an old checkpoint is deleted, and the whole folder once none of ``role_subdirs`` remains in it.
    Call after :func:`write_tracker`, so the newest checkpoint is safe before any older one goes. The tracked
    folder and the newest complete one (carrying the marker) are never deleted, whatever ``keep`` says.
    """
    if keep is None or keep < 1:
        return []
    checkpoints = list_checkpoints(root_path, directory_format)
    protected = {p for _, p in checkpoints[-keep:]}
    tracked = read_tracker(root_path)
    if tracked is not None:
        protected.add(os.path.join(root_path, directory_format.format(tracked)))
    complete = [p for _, p in checkpoints if is_complete_checkpoint(p)]
    if complete:
        protected.add(complete[-1])
    removed = []
    for _step, path in checkpoints:
        if path in protected:
            continue
        # The folder stops being a whole checkpoint; drop the marker first so nothing resumes from it.
        marker = os.path.join(path, COMPLETE_MARKER)
        if os.path.exists(marker):
            os.remove(marker)
        if subdir is not None:
            part = os.path.join(path, subdir)
            if os.path.isdir(part):
                _delete_dir(part)
                removed.append(part)
            if any(os.path.isdir(os.path.join(path, r)) for r in role_subdirs):
                continue
        _delete_dir(path)
        removed.append(path)
    return removed


def remove_stale_staging(root_path: str) -> list[str]:
    """Delete leftovers of killed saves and deletions (hidden ``.*.staging-*`` / ``.*.deleting-*`` folders)."""
    if not os.path.isdir(root_path):
        return []
    removed = []
    for name in os.listdir(root_path):
        if name.startswith(".") and (_STAGING_TAG in name or _TRASH_TAG in name):
            path = os.path.join(root_path, name)
            shutil.rmtree(path, ignore_errors=True)
            removed.append(path)
    return removed


# ------------------------------------------------------------------------------------------------------------
# base manager
# ------------------------------------------------------------------------------------------------------------
# environment variables that name the end of a rented instance's time (seconds since the epoch): volcengine's MLP and
# AWS SageMaker capacity blocks
CAPACITY_DEADLINE_VARIABLES = (
    "MLP_CURRENT_CAPACITY_BLOCK_EXPIRATION_TIMESTAMP",
    "SAGEMAKER_CURRENT_CAPACITY_BLOCK_EXPIRATION_TIMESTAMP",
)


def should_save_ckpt_esi(max_steps_duration: float, save_ckpt_duration: float = 60, redundant_time: float = 0) -> bool:
    """Whether the instance's deadline (``CAPACITY_DEADLINE_VARIABLES``; verl's "ESI", elastic server instance) is so
    close that the next step might not finish and be saved before it: the time left is under the longest step so far
    + the time a save takes + ``redundant_time``. False without a deadline, before the first step (no duration yet),
    or once the deadline has passed."""
    for name in CAPACITY_DEADLINE_VARIABLES:
        value = os.environ.get(name)
        if not value:
            continue
        try:
            left = float(value) - time.time()
        except ValueError:
            logger.warning("%s=%r is not a timestamp; no checkpoint is saved for the deadline", name, value)
            return False
        return 0 < left and max_steps_duration > 0 and left <= max_steps_duration + save_ckpt_duration + redundant_time
    return False


def _config_get(config, key: str, default=None):
    if config is None:
        return default
    if isinstance(config, dict):
        return config.get(key, default)
    getter = getattr(config, "get", None)
    if callable(getter):
        return getter(key, default)
    return getattr(config, key, default)


def _contents(config, key: str) -> list[str]:
    # v0.4.1 configs name one list ``contents`` for both directions; newer ones split save/load.
    value = _config_get(config, key)
    if value is None:
        value = _config_get(config, "contents")
    if value is None:
        return list(_DEFAULT_CONTENTS)
    if isinstance(value, str):
        raise TypeError(f"checkpoint.{key}={value!r} must be a list such as ['model', 'optimizer', 'extra']")
    allowed = {"model", "optimizer", "extra", "hf_model"}
    unknown = [v for v in value if v not in allowed]
    if unknown:
        raise ValueError(f"checkpoint.{key}={list(value)!r} has unknown item(s) {unknown}; allowed: {sorted(allowed)}")
    return list(value)


class BaseCheckpointManager(ABC):
    """What to save/load (``checkpoint_config.save_contents``/``load_contents``), rotation, and RNG state helpers."""

    def __init__(self, model, optimizer, lr_scheduler=None, processing_class=None, checkpoint_config=None):
        self.checkpoint_config = checkpoint_config
        self.checkpoint_save_contents = _contents(checkpoint_config, "save_contents")
        self.checkpoint_load_contents = _contents(checkpoint_config, "load_contents")
        self.previous_global_step = None
        self.previous_saved_paths: list[str] = []
        self.model = model
        self.optimizer = optimizer
        self.lr_scheduler = lr_scheduler
        self.processing_class = processing_class
        initialized = dist.is_available() and dist.is_initialized()
        self.rank = dist.get_rank() if initialized else 0
        self.world_size = dist.get_world_size() if initialized else 1

    @property
    def should_save_model(self) -> bool:
        """Whether ``model`` is in save_contents."""
        return "model" in self.checkpoint_save_contents

    @property
    def should_save_optimizer(self) -> bool:
        """Whether ``optimizer`` is in save_contents."""
        return "optimizer" in self.checkpoint_save_contents

    @property
    def should_save_extra(self) -> bool:
        """Whether ``extra`` (lr scheduler + RNG) is in save_contents."""
        return "extra" in self.checkpoint_save_contents

    @property
    def should_save_hf_model(self) -> bool:
        """Whether ``hf_model`` (full HF weights under ``huggingface/``) is in save_contents."""
        return "hf_model" in self.checkpoint_save_contents

    @property
    def should_load_model(self) -> bool:
        """Whether ``model`` is in load_contents."""
        return "model" in self.checkpoint_load_contents

    @property
    def should_load_optimizer(self) -> bool:
        """Whether ``optimizer`` is in load_contents."""
        return "optimizer" in self.checkpoint_load_contents

    @property
    def should_load_extra(self) -> bool:
        """Whether ``extra`` is in load_contents."""
        return "extra" in self.checkpoint_load_contents

    @abstractmethod
    def load_checkpoint(self, local_path: str, hdfs_path: str | None = None, del_local_after_load: bool = False):
        """Restore the state saved under ``local_path``."""

    @abstractmethod
    def save_checkpoint(
        self, local_path: str, hdfs_path: str | None = None, global_step: int = 0, max_ckpt_to_keep: int | None = None
    ):
        """Write the state into ``local_path`` (and copy it to ``hdfs_path`` if given)."""

    @staticmethod
    def checkpath(local_path: str | None, hdfs_path: str | None) -> tuple[bool, str | None]:
        """``(is_local, path)``: the local path when given, else the remote one."""
        assert local_path is not None or hdfs_path is not None, "local_path and hdfs_path cannot both be None"
        return local_path is not None, local_path if local_path is not None else hdfs_path

    def remove_previous_save_local_path(self, path: str | list[str]) -> None:
        """Delete earlier local checkpoint folders (missing ones are skipped)."""
        for p in [path] if isinstance(path, str) else path:
            abs_path = os.path.abspath(p)
            if os.path.exists(abs_path):
                logger.info("checkpoint manager removing previous checkpoint %s", abs_path)
                shutil.rmtree(abs_path, ignore_errors=True)

    def _rotate(self, max_ckpt_to_keep: int | None) -> None:
        """Before saving: delete the oldest saved folders so that ``max_ckpt_to_keep`` remain after this save."""
        if self.rank != 0 or not isinstance(max_ckpt_to_keep, int) or isinstance(max_ckpt_to_keep, bool):
            return
        if max_ckpt_to_keep <= 0 or len(self.previous_saved_paths) < max_ckpt_to_keep:
            return
        start = len(self.previous_saved_paths) - max_ckpt_to_keep + 1
        self.remove_previous_save_local_path(self.previous_saved_paths[:start])
        self.previous_saved_paths = self.previous_saved_paths[start:]

    @staticmethod
    def get_rng_state() -> dict:
        """RNG states of torch (cpu and the accelerator if any), numpy and python ``random``."""
        state = {"cpu": torch.get_rng_state(), "numpy": np.random.get_state(), "random": random.getstate()}
        if is_accelerator_available():
            state[get_device_name()] = get_torch_device().get_rng_state()
        return state

    @staticmethod
    def load_rng_state(rng_state: dict) -> None:
        """Restore what :meth:`get_rng_state` returned (an accelerator entry only where one exists)."""
        torch.set_rng_state(rng_state["cpu"])
        np.random.set_state(rng_state["numpy"])
        random.setstate(rng_state["random"])
        device = get_device_name()
        if is_accelerator_available() and device in rng_state:
            get_torch_device().set_rng_state(rng_state[device])
