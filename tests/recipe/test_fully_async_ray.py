"""The fully async trainer under Ray: a rollout worker killed mid-run (``ray.kill``, as a crash or an OOM kill
would) stops the run within 60 s with an error that names the rollout worker, and leaves no Rollouter thread.

One trainer and one rollout actor (2 of the session cluster's 4 CPUs, placement groups removed afterwards), the
tiny model of the PPO end-to-end tests, partial rollout on (the rollout actor runs two threads).
"""

import threading
import time

import pytest

from recipe.fully_async_policy.fully_async_trainer import FullyAsyncRayTrainer
from tests.recipe.test_fully_async_policy import _overrides, _rollouter_threads, compose_recipe, workspace  # noqa: F401
from verl.trainer.main_ppo import build_trainer, prepare_config


def _kill_when_generating(trainer, killed: dict) -> None:
    """Kill the rollout actor once the Rollouter has produced a mini-batch and started the next one."""
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:
        rollouter = trainer.rollouter
        if rollouter is not None and rollouter.generated >= 2:
            break
        time.sleep(0.05)
    import ray

    killed["at"] = time.monotonic()
    for handle in trainer.rollout_wg.workers:
        ray.kill(handle)


@pytest.mark.slow
def test_killed_rollout_worker_stops_the_run_naming_it_within_60s(ray_cluster, workspace):  # noqa: F811
    ray = ray_cluster
    extra = [
        "async_training.staleness_threshold=2",
        "async_training.partial_rollout=True",
        "actor_rollout_ref.rollout.name=hf",
        "trainer.watchdog_timeout_s=120",
    ]
    config = compose_recipe(_overrides(workspace, steps=50, extra=extra))
    prepare_config(config)
    trainer = build_trainer(config, trainer_cls=FullyAsyncRayTrainer)
    killed: dict = {}
    try:
        trainer.init_workers()
        killer = threading.Thread(target=_kill_when_generating, args=(trainer, killed), daemon=True)
        killer.start()
        with pytest.raises(Exception) as info:
            trainer.fit()
        stopped = time.monotonic()
        killer.join(5)
        assert "at" in killed, "the Rollouter never generated"
        message = str(info.value)
        print(f"stopped {stopped - killed['at']:.1f} s after the kill: {type(info.value).__name__}: {message[:300]}")
        assert stopped - killed["at"] < 60
        # the error names the rollout worker group and says it was lost
        assert "rollout" in message and "lost" in message, message
        assert trainer.global_steps < 50
        assert not _rollouter_threads()
    finally:
        groups = [trainer.__dict__.get(name) for name in ("actor_wg", "rollout_wg")]
        for group in filter(None, groups):
            for handle in group.workers:
                ray.kill(handle)
        for pool in trainer.resource_pool_manager.resource_pool_dict.values():
            for pg in pool.pgs or []:
                ray.util.remove_placement_group(pg)
