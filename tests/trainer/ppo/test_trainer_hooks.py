"""The trainer's step hooks that verl 0.9's keys drive: which steps open and close a profiler capture
(`global_profiler.steps` / `trainer.profile_steps`, `profile_continuous_steps`, the finish hook after the last one),
the user's checkpoint hook (`trainer.checkpoint_callback_class`), and the save before an instance's deadline
(`trainer.esi_redundant_time`). The trainer's methods run on a trainer object built without workers."""

from __future__ import annotations

import os
import time

import pytest

from tests.trainer.ppo_e2e_utils import compose_config
from verl.trainer.config import PPOConfig
from verl.trainer.config.trainer import apply_global_profiler
from verl.trainer.ppo.checkpoint_callback import CheckpointCallback, build_checkpoint_callback
from verl.trainer.ppo.checkpointing import CheckpointSaveError
from verl.trainer.ppo.ray_trainer import RayPPOTrainer
from verl.utils.checkpoint.checkpoint_manager import CAPACITY_DEADLINE_VARIABLES, should_save_ckpt_esi


class _Group:
    def __init__(self, calls: list):
        self.calls = calls

    def start_profile(self):
        self.calls.append("start")

    def stop_profile(self, run_command: bool = True):
        self.calls.append(f"stop{'+hook' if run_command else ''}")


def _trainer(overrides=(), total_steps: int = 10) -> RayPPOTrainer:
    trainer = RayPPOTrainer.__new__(RayPPOTrainer)
    trainer.config = compose_config(list(overrides))
    trainer.ppo_config = PPOConfig.from_config(trainer.config)
    trainer.total_training_steps = total_steps
    trainer.hybrid_engine = True
    return trainer


def _profile(trainer: RayPPOTrainer, steps=range(1, 11)) -> dict[int, list[str]]:
    calls_by_step = {}
    for step in steps:
        calls: list[str] = []
        trainer.actor_rollout_wg = _Group(calls)
        trainer.global_steps = step
        trainer._start_profiling()
        trainer._stop_profiling()
        if calls:
            calls_by_step[step] = calls
    return calls_by_step


@pytest.mark.parametrize("key", ["trainer.profile_steps", "global_profiler.steps"])
def test_either_spelling_of_the_steps_profiles_them_and_the_hook_runs_after_the_last(key):
    calls = _profile(_trainer([f"{key}=[2,5]"]))
    assert calls == {2: ["start", "stop"], 5: ["start", "stop+hook"]}


def test_continuous_steps_keep_one_capture_open():
    """[1, 2] in one capture, [5] in another (verl 0.9's profile_continuous_steps)."""
    trainer = _trainer(["global_profiler.steps=[1,2,5]", "global_profiler.profile_continuous_steps=True"])
    assert _profile(trainer) == {1: ["start"], 2: ["stop"], 5: ["start", "stop+hook"]}
    separate = _trainer(["global_profiler.steps=[1,2,5]"])
    assert _profile(separate) == {1: ["start", "stop"], 2: ["start", "stop"], 5: ["start", "stop+hook"]}


def test_a_run_shorter_than_the_profiled_steps_still_runs_the_hook():
    calls = _profile(_trainer(["global_profiler.steps=[2,50]"], total_steps=2), steps=range(1, 3))
    assert calls == {2: ["start", "stop+hook"]}


def test_roles_without_a_save_path_take_the_global_one():
    cfg = PPOConfig.from_config(
        compose_config(["global_profiler.save_path=/tmp/prof", "critic.profiler.save_path=/tmp/critic"])
    )
    apply_global_profiler(cfg)
    assert cfg.actor_rollout_ref.actor.profiler.save_path == "/tmp/prof"
    assert cfg.actor_rollout_ref.ref.profiler.save_path == "/tmp/prof"
    assert cfg.reward_model.profiler.save_path == "/tmp/prof"
    assert cfg.critic.profiler.save_path == "/tmp/critic"


# ------------------------------------------------------------------------------------------------ checkpoint hook
class RecordingCallback(CheckpointCallback):
    saved: list = []

    def on_save(self, trainer, global_step, checkpoint_dir, async_save=False, **kwargs):
        RecordingCallback.saved.append((global_step, checkpoint_dir, async_save, self.config is trainer.config))


class _Checkpointer:
    def __init__(self, root: str, fail: bool = False):
        self.root, self.fail = root, fail

    def step_folder(self, step: int) -> str:
        return os.path.join(self.root, f"global_step_{step}")

    def save(self, step, *args):
        if self.fail:
            raise CheckpointSaveError(step, self.step_folder(step), self.root, OSError("disk full"))


def _saving_trainer(tmp_path, overrides=(), fail=False) -> RayPPOTrainer:
    trainer = _trainer(["trainer.save_freq=2", *overrides])
    trainer.use_critic = False
    trainer.actor_rollout_wg = trainer.train_dataloader = None
    trainer.checkpointer = _Checkpointer(str(tmp_path), fail)
    cls = trainer.ppo_config.trainer.checkpoint_callback_class
    trainer.checkpoint_callback = build_checkpoint_callback(trainer.config, cls)
    trainer.max_steps_duration = 0.0
    return trainer


def test_checkpoint_callback_runs_after_each_published_checkpoint(tmp_path):
    RecordingCallback.saved = []
    trainer = _saving_trainer(tmp_path, [f"trainer.checkpoint_callback_class={__name__}.RecordingCallback"])
    for step in (1, 2, 3, 4):
        trainer.global_steps = step
        trainer._maybe_save_checkpoint(is_last_step=False, timing_raw={})
    assert RecordingCallback.saved == [
        (2, str(tmp_path / "global_step_2"), False, True),
        (4, str(tmp_path / "global_step_4"), False, True),
    ]
    # a save that failed and was skipped (on_save_error=continue) calls no hook
    RecordingCallback.saved = []
    failing = _saving_trainer(
        tmp_path,
        [f"trainer.checkpoint_callback_class={__name__}.RecordingCallback", "trainer.on_save_error=continue"],
        fail=True,
    )
    failing.global_steps = 2
    failing._maybe_save_checkpoint(is_last_step=False, timing_raw={})
    assert RecordingCallback.saved == [] and failing.checkpoint_save_failures == 1


def test_checkpoint_callback_class_must_name_a_class():
    with pytest.raises(ImportError, match="checkpoint_callback_class"):
        build_checkpoint_callback(None, "tests.trainer.ppo.test_trainer_hooks.NoSuchCallback")
    assert type(build_checkpoint_callback(None, None)) is CheckpointCallback


# ------------------------------------------------------------------------------------------------ instance deadline
def test_should_save_ckpt_esi_compares_the_time_left_with_a_step_a_save_and_the_margin(monkeypatch):
    for name in CAPACITY_DEADLINE_VARIABLES:
        monkeypatch.delenv(name, raising=False)
    assert not should_save_ckpt_esi(100)  # no deadline
    monkeypatch.setenv(CAPACITY_DEADLINE_VARIABLES[0], str(time.time() + 1000))
    assert not should_save_ckpt_esi(100, save_ckpt_duration=60, redundant_time=0)  # 1000 s left > 160
    assert should_save_ckpt_esi(100, save_ckpt_duration=60, redundant_time=900)  # < 1060
    assert not should_save_ckpt_esi(0, redundant_time=900)  # no step measured yet
    monkeypatch.setenv(CAPACITY_DEADLINE_VARIABLES[0], str(time.time() - 5))
    assert not should_save_ckpt_esi(100, redundant_time=900)  # past the deadline
    monkeypatch.delenv(CAPACITY_DEADLINE_VARIABLES[0])
    monkeypatch.setenv(CAPACITY_DEADLINE_VARIABLES[1], str(int(time.time() + 100)))
    assert should_save_ckpt_esi(50)


def test_a_near_deadline_saves_between_save_freq_steps(tmp_path, monkeypatch):
    RecordingCallback.saved = []
    trainer = _saving_trainer(
        tmp_path, [f"trainer.checkpoint_callback_class={__name__}.RecordingCallback", "trainer.esi_redundant_time=600"]
    )
    monkeypatch.setenv(CAPACITY_DEADLINE_VARIABLES[0], str(time.time() + 500))
    trainer.global_steps = 3
    trainer._maybe_save_checkpoint(is_last_step=False, timing_raw={})
    assert RecordingCallback.saved == []  # no step measured yet
    trainer.max_steps_duration = 10.0
    trainer._maybe_save_checkpoint(is_last_step=False, timing_raw={})
    assert [s[0] for s in RecordingCallback.saved] == [3]
