"""A policy worker SIGKILLed during generation, during the update and during the save, on Ray (tiny model, one CPU
worker): each run stops within seconds with an error naming the role, the phase and the memory of the worker's node;
nothing already on disk is lost; ``trainer.resume_mode=auto`` carries the run on, and finishes it.

One chain of four short runs of two steps (each a resume of the one before), so the file builds four trainers, not
six; one worker each, since starting the workers is most of the time (a rank whose peer dies while it waits in a
collective is tested in tests/single_controller/test_watchdog.py).
"""

import os
import time

import pytest
import ray

from tests.trainer.fault_workers import killing_worker
from tests.trainer.ppo_e2e_utils import base_overrides, compose_config, make_workspace, write_reward_fn
from verl.single_controller.base.watchdog import WorkerLostError
from verl.trainer.main_ppo import build_trainer, prepare_config
from verl.utils.checkpoint.checkpoint_manager import read_tracker
from verl.utils.checkpoint.integrity import checkpoint_problems

DEADLINE_S = 120  # trainer.watchdog_timeout_s of these runs: a loss must be reported well before it


@pytest.fixture(scope="module")
def workspace(tmp_path_factory):
    root = tmp_path_factory.mktemp("ray_faults")
    ws = make_workspace(root)
    ws["reward"] = write_reward_fn(root)
    return ws


def run(ws, run_dir, worker_cls=None):
    """``fit()`` of a 2-step run (a checkpoint every step) on Ray; its workers and placement groups are removed
    afterwards whatever happens (the session's cluster has 4 CPUs)."""
    overrides = base_overrides(ws, "grpo", steps=2) + [
        "actor_rollout_ref.actor.use_kl_loss=False",  # no reference model: a lighter worker
        "trainer.n_gpus_per_node=1",
        f"custom_reward_function.path={ws['reward']}",
        f"trainer.default_local_dir={run_dir}",
        "trainer.save_freq=1",
        "trainer.resume_mode=auto",
        "trainer.run_report=False",
        f"trainer.watchdog_timeout_s={DEADLINE_S}",
    ]
    config = compose_config(overrides)
    prepare_config(config)
    trainer = build_trainer(config, actor_rollout_cls=worker_cls)
    try:
        trainer.init_workers()
        trainer.fit()
        return trainer
    finally:
        for pool in trainer.resource_pool_manager.resource_pool_dict.values():
            for pg in pool.pgs or []:
                ray.util.remove_placement_group(pg)
        for worker in trainer.actor_rollout_wg.workers:
            ray.kill(worker)


def killed_run(ws, run_dir, phase, call, tmp_path):
    """A run whose policy worker is SIGKILLed on its ``call``-th ``phase``; the error and seconds from kill to it."""
    stamp = str(tmp_path / f"killed_in_{phase}")
    with pytest.raises(WorkerLostError) as info:
        run(ws, run_dir, killing_worker(phase, call, rank=0, stamp_file=stamp))
    reported_after = time.time() - float(open(stamp).read())
    return info.value, reported_after


def whole(run_dir, step):
    return checkpoint_problems(str(run_dir / f"global_step_{step}")) == []


@pytest.mark.slow
def test_worker_killed_in_each_phase_stops_the_run_and_resume_finishes_it(ray_cluster, workspace, tmp_path):
    run_dir = tmp_path / "ckpt"
    reports = {}
    # step 1 is saved; the worker dies in the generation of step 2
    reports["generate_sequences"] = killed_run(workspace, run_dir, "generate_sequences", 2, tmp_path)
    assert read_tracker(str(run_dir)) == 1 and whole(run_dir, 1)
    # resumed at step 2: the worker dies in its update
    reports["update_actor"] = killed_run(workspace, run_dir, "update_actor", 1, tmp_path)
    assert read_tracker(str(run_dir)) == 1 and whole(run_dir, 1)
    # resumed at step 2 again: the worker dies in its save, after writing its shards
    reports["save_checkpoint"] = killed_run(workspace, run_dir, "save_checkpoint", 1, tmp_path)
    assert read_tracker(str(run_dir)) == 1 and whole(run_dir, 1)
    assert sorted(os.listdir(run_dir)) == ["global_step_1", "latest_checkpointed_iteration.txt"]  # no staging left
    for phase, (error, seconds) in reports.items():
        message = str(error)
        assert error.role == "actor_rollout" and error.phase == phase and error.ranks == [0], message
        assert f"actor_rollout worker rank 0 was lost during '{phase}'" in message
        assert "Memory of the worker's node " in message and "the worker's resident memory" in message
        assert seconds < 30 < DEADLINE_S, (phase, seconds)
        print(f"{phase}: reported {seconds:.1f}s after the kill")
    # resume_mode=auto finishes the run from step 1's checkpoint
    trainer = run(workspace, run_dir)
    assert trainer.global_steps == 3  # one past the last step, as fit leaves it
    assert read_tracker(str(run_dir)) == 2 and whole(run_dir, 1) and whole(run_dir, 2)
