"""verl's Megatron GRPO command line (``--config-name ppo_megatron_trainer``), scaled down to the tiny model.

In-process worker group (world size 1), run in a spawned process so megatron-core's process-global parallel state
ends with it: one GRPO step through the config check, the Megatron actor and reference, the hand-off to the HF
rollout and the update; the actor's weights move and the rollout samples from the updated ones afterwards.
"""

from __future__ import annotations

import json

import pytest
import torch

pytest.importorskip("megatron.core", reason="megatron-core is not installed (pip install -e .[megatron])")

from tests.gloo_ranks import spawn_gloo_ranks  # noqa: E402
from tests.trainer.ppo_e2e_utils import base_overrides, compose_config, make_workspace, write_reward_fn  # noqa: E402


def _one_step(rank: int, ws: dict, out: str) -> None:
    from verl.single_controller.inprocess import InProcessWorkerGroup
    from verl.trainer.main_ppo import build_trainer, prepare_config

    overrides = base_overrides(ws, "grpo", steps=1) + [
        "trainer.n_gpus_per_node=1",
        "trainer.resume_mode=disable",
        f"custom_reward_function.path={ws['reward']}",
        "trainer.run_report=False",
    ]
    config = compose_config(overrides, "ppo_megatron_trainer")
    prepare_config(config)  # the driver's config check: accepts this configuration
    trainer = build_trainer(config, ray_worker_group_cls=InProcessWorkerGroup)
    trainer.init_workers()
    worker = trainer.actor_rollout_wg.workers[0].worker_dict["actor_rollout"]
    engine = worker.actor_engine
    before = {name: t.clone() for name, t in engine.hf_weights()}
    trainer.fit()
    after = {name: t.clone() for name, t in engine.hf_weights()}
    rollout_module = worker.rollout.module
    with worker.rollout_sharding_manager:  # the hand-off before the next generation
        rollout_state = {k: v.clone() for k, v in rollout_module.state_dict().items()}
    result = {
        "engine": type(engine).__name__,
        "moved": max((after[k] - before[k]).abs().max().item() for k in after),
        "rollout_is_current": all(torch.equal(rollout_state[k], after[k]) for k in after),
        "global_steps": trainer.global_steps,
    }
    with open(out, "w") as f:
        json.dump(result, f)


def test_megatron_grpo_step_in_process(tmp_path):
    ws = make_workspace(tmp_path)
    ws["reward"] = write_reward_fn(tmp_path)
    out = str(tmp_path / "result.json")
    spawn_gloo_ranks(_one_step, 1, ws, out)
    with open(out) as f:
        result = json.load(f)
    assert result["engine"] == "MegatronEngine"
    assert result["moved"] > 1e-4 and result["rollout_is_current"], result
