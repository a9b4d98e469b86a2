"""Damaged checkpoints and failed saves: the manifest, the integrity check, the resume fallback, the save error."""

import errno
import json
import logging
import os

import pytest
import torch

from verl.trainer.config import TrainerConfig
from verl.trainer.ppo.checkpointing import CheckpointSaveError, TrainerCheckpointer
from verl.utils.checkpoint.checkpoint_manager import (
    COMPLETE_MARKER,
    find_resumable_ckpt_path,
    publish_checkpoint,
    read_tracker,
    remove_old_checkpoints,
    staging_dir,
    write_tracker,
)
from verl.utils.checkpoint.integrity import CheckpointDamagedError, checkpoint_problems, verify_checkpoint


def _write_role(folder: str, world_size: int = 2, step: int = 0) -> None:
    os.makedirs(folder, exist_ok=True)
    for rank in range(world_size):
        for kind in ("model", "optim", "extra_state"):
            name = f"{kind}_world_size_{world_size}_rank_{rank}.pt"
            torch.save({"w": torch.full((64,), float(step + rank))}, os.path.join(folder, name))
    with open(os.path.join(folder, "fsdp_config.json"), "w") as f:
        json.dump({"FSDP_version": 2, "world_size": world_size}, f)


def _save(root, step: int) -> str:
    final = os.path.join(str(root), f"global_step_{step}")
    staging = staging_dir(final)
    _write_role(os.path.join(staging, "actor"), step=step)
    torch.save({"epoch": 0}, os.path.join(staging, "data.pt"))
    publish_checkpoint(staging, final, metadata={"global_step": step})
    write_tracker(str(root), step)
    return final


def _truncate(path: str, keep: int = 100) -> None:
    with open(path, "r+b") as f:
        f.truncate(keep)


def test_manifest_lists_every_file_with_its_size(tmp_path):
    final = _save(tmp_path, 1)
    with open(os.path.join(final, COMPLETE_MARKER)) as f:
        marker = json.load(f)
    files = marker["files"]
    assert marker["global_step"] == 1
    assert "actor/optim_world_size_2_rank_1.pt" in files and "data.pt" in files
    assert len(files) == 8  # 6 shards + fsdp_config.json + data.pt; the marker itself is not listed
    for rel, entry in files.items():
        assert entry["size"] == os.path.getsize(os.path.join(final, rel))
    assert checkpoint_problems(final) == []


def test_truncated_latest_checkpoint_falls_back_with_a_warning(tmp_path, caplog):
    first = _save(tmp_path, 1)
    second = _save(tmp_path, 2)
    bad = os.path.join(second, "actor", "optim_world_size_2_rank_0.pt")
    _truncate(bad)
    with caplog.at_level(logging.WARNING):
        assert find_resumable_ckpt_path(str(tmp_path)) == first
    assert bad in caplog.text and "truncated" in caplog.text
    # a byte changed in place (same size) is caught by the checksum
    path = os.path.join(first, "actor", "model_world_size_2_rank_1.pt")
    data = bytearray(open(path, "rb").read())
    data[-10] ^= 0xFF
    open(path, "wb").write(bytes(data))
    with pytest.raises(CheckpointDamagedError, match="model_world_size_2_rank_1.pt: checksum"):
        verify_checkpoint(first)
    assert find_resumable_ckpt_path(str(tmp_path)) is None


def test_resume_path_to_damaged_checkpoint_names_the_file(tmp_path):
    _save(tmp_path, 1)
    second = _save(tmp_path, 2)
    os.remove(os.path.join(second, "actor", "extra_state_world_size_2_rank_1.pt"))
    config = TrainerConfig(default_local_dir=str(tmp_path), resume_mode="resume_path", resume_from_path=second)
    with pytest.raises(CheckpointDamagedError, match="extra_state_world_size_2_rank_1.pt: missing"):
        TrainerCheckpointer(config)._resume_folder()
    # auto: step 1 is used; with step 1 damaged too, auto refuses instead of silently starting from scratch
    auto = TrainerCheckpointer(TrainerConfig(default_local_dir=str(tmp_path), resume_mode="auto"))
    assert auto._resume_folder() == str(tmp_path / "global_step_1")
    _truncate(str(tmp_path / "global_step_1" / "data.pt"))
    with pytest.raises(RuntimeError, match="no checkpoint .* is whole"):
        auto._resume_folder()


def test_legacy_checkpoint_without_manifest_checks_shards_and_readability(tmp_path):
    folder = tmp_path / "global_step_5"
    _write_role(str(folder / "actor"), world_size=2)
    torch.save({}, str(folder / "data.pt"))
    write_tracker(str(tmp_path), 5)
    assert find_resumable_ckpt_path(str(tmp_path)) == str(folder)
    os.remove(folder / "actor" / "model_world_size_2_rank_1.pt")
    problems = checkpoint_problems(str(folder))
    assert problems == [(str(folder / "actor" / "model_world_size_2_rank_1.pt"), problems[0][1])]
    assert "world_size=2" in problems[0][1]
    _write_role(str(folder / "actor"), world_size=2)
    _truncate(str(folder / "actor" / "optim_world_size_2_rank_0.pt"))
    with pytest.raises(CheckpointDamagedError, match="optim_world_size_2_rank_0.pt: not a readable torch file"):
        verify_checkpoint(str(folder))


def test_rotation_never_deletes_the_newest_complete_checkpoint(tmp_path):
    first = _save(tmp_path, 1)
    # a newer folder that was never published (a legacy writer died in it) and a tracker that lags behind
    os.makedirs(tmp_path / "global_step_2" / "actor")
    write_tracker(str(tmp_path), 0)
    remove_old_checkpoints(str(tmp_path), 1, subdir="actor")
    assert os.path.isfile(os.path.join(first, COMPLETE_MARKER)) and os.path.isdir(os.path.join(first, "actor"))


class _Group:
    """A worker group stand-in whose save writes real shards, or fails as a full disk would."""

    def __init__(self, fail: bool = False):
        self.fail = fail

    def save_checkpoint(self, local_path, hdfs_path, step, max_ckpt_to_keep):
        if self.fail:
            _write_role(local_path, step=step)  # half the files are there when the disk fills up
            raise OSError(errno.ENOSPC, "No space left on device", os.path.join(local_path, "optim.pt"))
        _write_role(local_path, step=step)


class _Loader:
    def state_dict(self):
        return {"epoch": 0}


def test_failed_save_keeps_earlier_checkpoints_and_the_tracker(tmp_path):
    config = TrainerConfig(default_local_dir=str(tmp_path), max_actor_ckpt_to_keep=1)
    checkpointer = TrainerCheckpointer(config)
    checkpointer.save(1, _Group(), None, _Loader())
    actor = tmp_path / "global_step_1" / "actor"
    before = {n: os.path.getsize(actor / n) for n in os.listdir(actor)}
    with pytest.raises(CheckpointSaveError) as info:
        checkpointer.save(2, _Group(fail=True), None, _Loader())
    message = str(info.value)
    assert str(tmp_path / "global_step_2") in message and "No space left on device" in message
    assert "latest: global_step_1" in message
    assert read_tracker(str(tmp_path)) == 1
    assert sorted(os.listdir(tmp_path)) == ["global_step_1", "latest_checkpointed_iteration.txt"]
    after = {n: os.path.getsize(actor / n) for n in before}
    assert after == before
    assert find_resumable_ckpt_path(str(tmp_path)) == str(tmp_path / "global_step_1")


def test_unwritable_checkpoint_folder_is_an_error_naming_the_path(tmp_path, monkeypatch):
    # root ignores permission bits, so the read-only folder is injected where the staging folder is made
    config = TrainerConfig(default_local_dir=str(tmp_path / "ckpt"))
    checkpointer = TrainerCheckpointer(config)
    checkpointer.save(1, _Group(), None, _Loader())

    def read_only(path, *args, **kwargs):
        raise PermissionError(errno.EACCES, "Permission denied", path)

    monkeypatch.setattr(os, "makedirs", read_only)
    with pytest.raises(CheckpointSaveError, match=r"global_step_2 failed: PermissionError: .*Permission denied"):
        checkpointer.save(2, _Group(), None, _Loader())
    monkeypatch.undo()
    assert read_tracker(str(tmp_path / "ckpt")) == 1
    assert checkpoint_problems(str(tmp_path / "ckpt" / "global_step_1")) == []
