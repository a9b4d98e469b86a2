"""Atomic checkpoint publishing: a save killed at any point leaves the previous checkpoint and the tracker usable."""

import os
import signal
import subprocess
import sys
import textwrap

import pytest

import verl.utils.checkpoint.checkpoint_manager as cm
from verl.utils.checkpoint.checkpoint_manager import (
    COMPLETE_MARKER,
    find_latest_ckpt_path,
    get_checkpoint_tracker_filename,
    is_complete_checkpoint,
    publish_checkpoint,
    read_tracker,
    remove_old_checkpoints,
    remove_stale_staging,
    staging_dir,
    write_tracker,
)


def _save(root, step: int, payload: str = "weights", roles=("actor", "critic")) -> str:
    """The trainer's protocol: stage, write every part, publish, then move the tracker."""
    final = os.path.join(root, f"global_step_{step}")
    staging = staging_dir(final)
    for role in roles:
        os.makedirs(os.path.join(staging, role))
        with open(os.path.join(staging, role, "model_world_size_1_rank_0.pt"), "w") as f:
            f.write(f"{payload}-{step}-{role}")
    with open(os.path.join(staging, "data.pt"), "w") as f:
        f.write("loader")
    publish_checkpoint(staging, final, metadata={"global_step": step})
    write_tracker(str(root), step)
    return final


def _read(folder, role="actor") -> str:
    with open(os.path.join(folder, role, "model_world_size_1_rank_0.pt")) as f:
        return f.read()


def test_tracker_names_published_checkpoint(tmp_path):
    assert find_latest_ckpt_path(None) is None
    assert find_latest_ckpt_path(str(tmp_path)) is None
    final = _save(tmp_path, 3)
    assert get_checkpoint_tracker_filename(str(tmp_path)) == str(tmp_path / "latest_checkpointed_iteration.txt")
    assert (tmp_path / "latest_checkpointed_iteration.txt").read_text() == "3"
    assert find_latest_ckpt_path(str(tmp_path)) == final
    assert is_complete_checkpoint(final)
    # Nothing but the published folder and the tracker is left behind.
    assert sorted(os.listdir(tmp_path)) == ["global_step_3", "latest_checkpointed_iteration.txt"]
    # The tracker naming a missing folder gives None (verl's behaviour).
    write_tracker(str(tmp_path), 9)
    assert find_latest_ckpt_path(str(tmp_path)) is None


_KILLED_SAVER = textwrap.dedent(
    """
    import os, sys, time
    from verl.utils.checkpoint.checkpoint_manager import staging_dir
    root, step = sys.argv[1], int(sys.argv[2])
    staging = staging_dir(os.path.join(root, f"global_step_{step}"))
    os.makedirs(os.path.join(staging, "actor"))
    with open(os.path.join(staging, "actor", "model_world_size_1_rank_0.pt"), "w") as f:
        f.write("half a shard")
        f.flush()
        print("writing", flush=True)
        time.sleep(60)  # killed here, mid-save
    """
)


def test_save_killed_midway_keeps_previous_checkpoint(tmp_path):
    previous = _save(tmp_path, 1)
    proc = subprocess.Popen(
        [sys.executable, "-c", _KILLED_SAVER, str(tmp_path), "2"],
        stdout=subprocess.PIPE,
        text=True,
        cwd=os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(__file__)))),
    )
    try:
        assert proc.stdout.readline().strip() == "writing"
        proc.send_signal(signal.SIGKILL)
        proc.wait(timeout=30)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == -signal.SIGKILL
    # The half-written save lives only under a hidden staging name; step 1 and the tracker are untouched.
    leftovers = [n for n in os.listdir(tmp_path) if n.startswith(".global_step_2.staging-")]
    assert len(leftovers) == 1
    assert read_tracker(str(tmp_path)) == 1
    assert find_latest_ckpt_path(str(tmp_path)) == previous
    assert _read(previous) == "weights-1-actor"
    assert remove_stale_staging(str(tmp_path)) == [str(tmp_path / leftovers[0])]
    # The next attempt at step 2 succeeds and moves the tracker.
    assert find_latest_ckpt_path(str(tmp_path)) == previous
    assert _read(_save(tmp_path, 2)) == "weights-2-actor"
    assert find_latest_ckpt_path(str(tmp_path)) == str(tmp_path / "global_step_2")


def test_crash_between_publish_and_tracker(tmp_path):
    previous = _save(tmp_path, 1)
    final = str(tmp_path / "global_step_2")
    staging = staging_dir(final)
    os.makedirs(os.path.join(staging, "actor"))
    publish_checkpoint(staging, final)
    # Killed before write_tracker: the tracker still names step 1, which is whole.
    assert find_latest_ckpt_path(str(tmp_path)) == previous
    # Resuming from step 1 later re-saves step 2 over the orphan.
    assert _read(_save(tmp_path, 2, payload="again")) == "again-2-actor"
    assert find_latest_ckpt_path(str(tmp_path)) == final


@pytest.mark.parametrize("exchange", [True, False])
def test_publish_over_existing_step(tmp_path, monkeypatch, exchange):
    if not exchange:
        monkeypatch.setattr(cm, "_rename_exchange", lambda src, dst: False)
    _save(tmp_path, 5, payload="old")
    final = _save(tmp_path, 5, payload="new")
    assert _read(final) == "new-5-actor"
    assert _read(final, "critic") == "new-5-critic"
    assert sorted(os.listdir(tmp_path)) == ["global_step_5", "latest_checkpointed_iteration.txt"]


def test_failed_tracker_write_keeps_old_tracker(tmp_path, monkeypatch):
    _save(tmp_path, 1)

    def broken_replace(src, dst):
        raise OSError("disk full")

    monkeypatch.setattr(cm.os, "replace", broken_replace)
    with pytest.raises(OSError, match="disk full"):
        write_tracker(str(tmp_path), 2)
    monkeypatch.undo()
    assert read_tracker(str(tmp_path)) == 1
    assert sorted(os.listdir(tmp_path)) == ["global_step_1", "latest_checkpointed_iteration.txt"]
    with pytest.raises(TypeError, match="step='2'"):
        write_tracker(str(tmp_path), "2")


def test_incomplete_tracked_folder_falls_back(tmp_path):
    first = _save(tmp_path, 1)
    _save(tmp_path, 2)
    # A tracked folder without the marker (e.g. a non-atomic writer died) is skipped for the newest whole one.
    os.remove(tmp_path / "global_step_2" / COMPLETE_MARKER)
    assert find_latest_ckpt_path(str(tmp_path)) == first
    os.remove(tmp_path / "global_step_1" / COMPLETE_MARKER)
    # With no marker anywhere the folder is a legacy (verl) checkpoint and is trusted as tracked.
    assert find_latest_ckpt_path(str(tmp_path)) == str(tmp_path / "global_step_2")


def test_legacy_verl_checkpoint_is_found(tmp_path):
    (tmp_path / "global_step_7" / "actor").mkdir(parents=True)
    (tmp_path / "latest_checkpointed_iteration.txt").write_text("7\n")
    assert find_latest_ckpt_path(str(tmp_path)) == str(tmp_path / "global_step_7")
    assert find_latest_ckpt_path(str(tmp_path), directory_format="step_{}") is None


def test_remove_old_checkpoints(tmp_path):
    for step in (1, 2, 3, 4):
        _save(tmp_path, step)
    assert remove_old_checkpoints(str(tmp_path), None) == []
    assert remove_old_checkpoints(str(tmp_path), 0) == []
    # Actor rotation keeps 3 actors; folders keep their critic.
    removed = remove_old_checkpoints(str(tmp_path), 3, subdir="actor")
    assert removed == [str(tmp_path / "global_step_1" / "actor")]
    assert sorted(os.listdir(tmp_path / "global_step_1")) == ["critic", "data.pt"]
    assert not is_complete_checkpoint(str(tmp_path / "global_step_1"))
    # Critic rotation to 2: step 1 loses its last role and goes entirely; step 2 keeps its actor.
    removed = remove_old_checkpoints(str(tmp_path), 2, subdir="critic")
    assert str(tmp_path / "global_step_1") in removed
    assert not (tmp_path / "global_step_1").exists()
    assert sorted(os.listdir(tmp_path / "global_step_2")) == ["actor", "data.pt"]
    # Whole-folder rotation keeps the newest one and the tracked one.
    write_tracker(str(tmp_path), 3)
    remove_old_checkpoints(str(tmp_path), 1)
    names = sorted(n for n in os.listdir(tmp_path) if n.startswith("global_step_"))
    assert names == ["global_step_3", "global_step_4"]
    assert not any(n.startswith(".") for n in os.listdir(tmp_path))


def test_staging_dir_is_hidden_and_fresh(tmp_path):
    final = str(tmp_path / "global_step_1")
    first = staging_dir(final)
    second = staging_dir(final)
    assert os.path.basename(second).startswith(".global_step_1.staging-")
    # A new staging folder replaces the leftovers of an earlier attempt at the same step.
    assert not os.path.exists(first) and os.path.isdir(second)
    assert find_latest_ckpt_path(str(tmp_path)) is None
    with pytest.raises(FileNotFoundError, match="staging folder"):
        publish_checkpoint(first, final)
