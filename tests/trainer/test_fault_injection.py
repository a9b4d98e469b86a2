"""Injected faults on a tiny model in-process (no Ray): NaN loss, NaN reward, damaged checkpoint, hung phase, full disk.

Each run is one or two steps; the checks are the stop, its message, and what is (and is not) on disk.
"""

import contextlib
import os
import time

import pytest
import torch
import torch.distributed as dist

from tests.trainer.ppo_e2e_utils import base_overrides, compose_config, make_workspace, write_reward_fn
from verl.single_controller.base.watchdog import WorkerGroupTimeout
from verl.single_controller.inprocess import InProcessWorkerGroup
from verl.trainer.main_ppo import build_trainer, prepare_config
from verl.trainer.ppo.core_algos import POLICY_LOSS_REGISTRY, get_policy_loss_fn, register_policy_loss
from verl.utils.checkpoint.checkpoint_manager import read_tracker
from verl.utils.checkpoint.integrity import CheckpointDamagedError

NAN_REWARD_FN = """
def compute_score(data_source, solution_str, ground_truth, extra_info=None):
    return float("nan")
"""


@pytest.fixture(scope="module")
def workspace(tmp_path_factory):
    root = tmp_path_factory.mktemp("faults")
    ws = make_workspace(root)
    ws["reward"] = write_reward_fn(root)
    nan_reward = root / "nan_reward.py"
    nan_reward.write_text(NAN_REWARD_FN)
    ws["nan_reward"] = str(nan_reward)
    yield ws
    if dist.is_initialized():
        dist.destroy_process_group()


@pytest.fixture(scope="module")
def nan_loss_mode():
    """A policy loss that is NaN: the vanilla loss times NaN (its gradients are NaN too)."""
    vanilla = get_policy_loss_fn("vanilla")

    @register_policy_loss("test_nan")
    def nan_loss(old_log_prob, log_prob, advantages, response_mask, loss_agg_mode, config):
        pg_loss, *rest = vanilla(old_log_prob, log_prob, advantages, response_mask, loss_agg_mode, config)
        return (pg_loss * float("nan"), *rest)

    yield "test_nan"
    POLICY_LOSS_REGISTRY.pop("test_nan")


def make_trainer(ws, run_dir, steps=2, reward=None, extra=()):
    overrides = base_overrides(ws, "grpo", steps=steps) + [
        "trainer.n_gpus_per_node=1",
        f"custom_reward_function.path={reward or ws['reward']}",
        f"trainer.default_local_dir={run_dir}",
        "trainer.run_report=False",
        *extra,
    ]
    config = compose_config(overrides)
    prepare_config(config)
    trainer = build_trainer(config, ray_worker_group_cls=InProcessWorkerGroup)
    trainer.init_workers()
    return trainer


def actor_state(trainer):
    worker = trainer.actor_rollout_wg.workers[0].worker_dict["actor_rollout"]
    engine = worker.actor_engine
    params = {k: v.detach().clone() for k, v in worker.actor_module.state_dict().items()}
    optim = {k: {n: t.clone() for n, t in s.items() if torch.is_tensor(t)} for k, s in engine.optimizer.state.items()}
    return params, optim


def test_nan_loss_skips_updates_and_stops_after_k_in_a_row(workspace, tmp_path, nan_loss_mode, caplog):
    run_dir = tmp_path / "ckpt"
    # step 1 trains normally and saves; steps 2 and 3 have a NaN loss; K=2 stops at step 3, before its save
    trainer = make_trainer(
        workspace, run_dir, steps=3, extra=["trainer.save_freq=1", "trainer.max_consecutive_nonfinite=2"]
    )
    logged = []
    real_step = type(trainer).train_step

    def train_step(self, batch, timing_raw):
        if self.global_steps == 2:
            self.actor_rollout_wg.workers[0].worker_dict[
                "actor_rollout"
            ].actor.config.policy_loss.loss_mode = nan_loss_mode
            logged.append(actor_state(self))
        out = real_step(self, batch, timing_raw)
        logged.append(out[1])
        return out

    trainer.train_step = train_step.__get__(trainer)
    with pytest.raises(FloatingPointError, match=r"2 steps in a row up to step 3 .*max_consecutive_nonfinite=2"):
        trainer.fit()
    step1, (params_before, optim_before), step2, step3 = logged
    assert step1["actor/nonfinite_skipped"] == 0 and torch.isfinite(torch.tensor(step1["actor/grad_norm"]))
    assert step2["actor/nonfinite_skipped"] == 1 and step3["actor/nonfinite_skipped"] == 1
    params_after, optim_after = actor_state(trainer)
    assert all(torch.equal(params_before[k], params_after[k]) for k in params_before)
    assert optim_before.keys() == optim_after.keys() and optim_before
    for key, state in optim_before.items():
        assert all(torch.equal(t, optim_after[key][n]) for n, t in state.items())
    assert "actor update at global step 2, mini batch 0: non-finite loss (micro batch 0 loss=nan" in caplog.text
    # the step-3 checkpoint was never written: the last one is step 2's (its weights are step 1's)
    assert read_tracker(str(run_dir)) == 2
    assert not (run_dir / "global_step_3").exists()


def test_nan_reward_skips_the_update(workspace, tmp_path):
    trainer = make_trainer(workspace, tmp_path / "ckpt", steps=1, reward=workspace["nan_reward"])
    before, _ = actor_state(trainer)
    logged = []
    real_step = type(trainer).train_step
    trainer.train_step = (lambda self, b, t: logged.append(real_step(self, b, t)) or logged[-1]).__get__(trainer)
    trainer.fit()
    metrics = logged[0][1]
    assert metrics["training/nonfinite_reward"] == 8  # 4 prompts x 2 responses
    assert "actor/pg_loss" not in metrics  # no update ran
    after, _ = actor_state(trainer)
    assert all(torch.equal(before[k], after[k]) for k in before)


def test_truncated_latest_checkpoint_resumes_from_the_previous_one(workspace, tmp_path, caplog):
    run_dir = tmp_path / "ckpt"
    make_trainer(workspace, run_dir, steps=2, extra=["trainer.save_freq=1"]).fit()
    assert read_tracker(str(run_dir)) == 2
    bad = run_dir / "global_step_2" / "actor" / "optim_world_size_1_rank_0.pt"
    with open(bad, "r+b") as f:
        f.truncate(os.path.getsize(bad) // 2)
    resumed = make_trainer(workspace, run_dir, steps=2, extra=["trainer.resume_mode=auto"])
    with caplog.at_level("WARNING"):
        assert resumed._load_checkpoint() == 1
    assert f"checkpoint {run_dir / 'global_step_2'} is damaged, skipping it: {bad}" in caplog.text
    explicit = make_trainer(
        workspace,
        run_dir,
        steps=2,
        extra=["trainer.resume_mode=resume_path", f"trainer.resume_from_path={run_dir / 'global_step_2'}"],
    )
    with pytest.raises(CheckpointDamagedError, match="optim_world_size_1_rank_0.pt"):
        explicit._load_checkpoint()


def test_hung_generation_stops_with_the_phase_and_the_line(workspace, tmp_path):
    run_dir = tmp_path / "ckpt"
    trainer = make_trainer(workspace, run_dir, steps=1, extra=["trainer.watchdog_phase_timeout_s.generate_sequences=2"])
    rollout_worker = trainer.actor_rollout_wg.workers[0].worker_dict["actor_rollout"]

    def hung_generate(prompts):
        time.sleep(120)  # a rollout that never comes back

    rollout_worker.rollout.generate_sequences = hung_generate
    start = time.monotonic()
    with pytest.raises(WorkerGroupTimeout) as info:
        trainer.fit()
    assert time.monotonic() - start < 30
    message = str(info.value)
    assert "'generate_sequences' did not return within 2s (trainer.watchdog_phase_timeout_s.generate_sequences)" in (
        message
    )
    assert "test_fault_injection.py:" in info.value.stuck[0] and "in hung_generate" in info.value.stuck[0]
    assert info.value.dump_dir.startswith(str(run_dir / "watchdog" / "generate_sequences-"))
    assert "hung_generate" in open(os.path.join(info.value.dump_dir, "rank_0.txt")).read()


def test_disk_full_during_save_keeps_the_previous_checkpoint(workspace, tmp_path, monkeypatch):
    import errno

    import verl.utils.checkpoint.fsdp_checkpoint_manager as fsdp_ckpt
    from verl.trainer.ppo.checkpointing import CheckpointSaveError
    from verl.utils.checkpoint.integrity import checkpoint_problems

    run_dir = tmp_path / "ckpt"
    extra = ["trainer.save_freq=1", "trainer.max_actor_ckpt_to_keep=1"]
    trainer = make_trainer(workspace, run_dir, steps=2, extra=extra)
    real_save = fsdp_ckpt._atomic_torch_save

    def save(obj, path):
        if "optim" in os.path.basename(path) and trainer.global_steps == 2:
            raise OSError(errno.ENOSPC, "No space left on device", path)
        real_save(obj, path)

    monkeypatch.setattr(fsdp_ckpt, "_atomic_torch_save", save)
    with pytest.raises(CheckpointSaveError, match=r"step 2 to .*global_step_2 failed: OSError: .*No space left"):
        trainer.fit()
    assert read_tracker(str(run_dir)) == 1
    assert checkpoint_problems(str(run_dir / "global_step_1")) == []
    assert sorted(os.listdir(run_dir)) == ["global_step_1", "latest_checkpointed_iteration.txt"]


@contextlib.contextmanager
def read_only_folder(path, monkeypatch):
    """``path`` made read-only: its mode where permissions count, else (root) the immutable attribute, else (root
    without that capability) creating anything in it fails with EACCES as a read-only folder's would."""
    import errno
    import subprocess

    def writable():
        try:
            open(os.path.join(path, ".probe"), "w").close()
            os.remove(os.path.join(path, ".probe"))
            return True
        except OSError:
            return False

    mode = os.stat(path).st_mode
    os.chmod(path, 0o555)
    immutable = False
    if writable():
        immutable = subprocess.run(["chattr", "+i", str(path)], capture_output=True).returncode == 0 and not writable()
    if writable():
        real = os.makedirs

        def makedirs(name, *args, **kwargs):
            if os.path.dirname(os.path.abspath(name)) == os.path.abspath(path):
                raise PermissionError(errno.EACCES, "Permission denied", name)
            return real(name, *args, **kwargs)

        monkeypatch.setattr(os, "makedirs", makedirs)
    try:
        yield
    finally:
        monkeypatch.undo()
        if immutable:
            subprocess.run(["chattr", "-i", str(path)], check=True)
        os.chmod(path, mode)


def test_failed_save_can_continue_with_a_warning(workspace, tmp_path, monkeypatch, caplog):
    run_dir = tmp_path / "ckpt"
    extra = ["trainer.save_freq=1", "trainer.on_save_error=continue", "trainer.max_actor_ckpt_to_keep=1"]
    trainer = make_trainer(workspace, run_dir, steps=3, extra=extra)
    logged = []
    real_step = type(trainer).train_step

    def train_step(self, batch, timing_raw):
        out = real_step(self, batch, timing_raw)
        logged.append(out[1])
        return out

    trainer.train_step = train_step.__get__(trainer)
    real_save = type(trainer)._save_checkpoint
    folder = []

    def save(self):
        if self.global_steps == 2:  # step 1 is saved; from step 2 on the folder is read-only
            folder.append(read_only_folder(run_dir, monkeypatch))
            folder[0].__enter__()
        real_save(self)

    trainer._save_checkpoint = save.__get__(trainer)
    try:
        with caplog.at_level("ERROR"):
            trainer.fit()  # steps 2 and 3 fail to save, and the run goes on to the end
    finally:
        if folder:
            folder[0].__exit__(None, None, None)
    assert trainer.global_steps == 4
    assert [m["training/checkpoint_save_failures"] for m in logged] == [0, 1, 2]
    assert caplog.text.count("CHECKPOINT NOT SAVED, training goes on (trainer.on_save_error=continue") == 2
    assert f"saving the checkpoint of step 3 to {run_dir / 'global_step_3'} failed: PermissionError" in caplog.text
    # step 1, the last complete checkpoint, is whole and still tracked (rotation to one checkpoint kept it)
    assert read_tracker(str(run_dir)) == 1
    assert sorted(os.listdir(run_dir)) == ["global_step_1", "latest_checkpointed_iteration.txt"]
    from verl.utils.checkpoint.integrity import checkpoint_problems

    assert checkpoint_problems(str(run_dir / "global_step_1")) == []


def test_memory_hints_name_real_config_keys():
    """The settings named when a worker is lost for memory exist in ppo_trainer.yaml; each phase has a deadline key."""
    import re

    from omegaconf import OmegaConf

    from verl.trainer.ppo.ray_trainer import MEMORY_HINTS

    config = compose_config([])
    for phase, hints in MEMORY_HINTS.items():
        assert phase in config.trainer.watchdog_phase_timeout_s, phase
        for hint in hints:
            for key in re.findall(r"[a-z_]+(?:\.[a-z_]+)+", hint):
                assert OmegaConf.select(config, key, default="missing") != "missing", (phase, key)


HUNG_REWARD_FN = """
import time


def compute_score(data_source, solution_str, ground_truth, extra_info=None):
    time.sleep(120)  # a rule that never returns
    return 0.0
"""


def test_hung_reward_function_stops_with_the_phase_and_the_line(workspace, tmp_path):
    reward = tmp_path / "hung_reward.py"
    reward.write_text(HUNG_REWARD_FN)
    run_dir = tmp_path / "ckpt"
    extra = ["trainer.watchdog_phase_timeout_s.compute_reward=2"]
    trainer = make_trainer(workspace, run_dir, steps=1, reward=str(reward), extra=extra)
    start = time.monotonic()
    with pytest.raises(WorkerGroupTimeout) as info:
        trainer.fit()
    assert time.monotonic() - start < 30
    message = str(info.value)
    assert "driver phase 'compute_reward' did not return within 2s" in message
    assert f"driver at {reward}:6 in compute_score" in message
    assert os.listdir(info.value.dump_dir) == ["rank_driver.txt"]
