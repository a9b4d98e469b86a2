"""verl's Megatron command lines (``--config-name ppo_megatron_trainer``), scaled down to the tiny model: GRPO, and
PPO with a critic (GAE) with actor, reference and critic all ``strategy=megatron``.

In-process worker group (world size 1), run in a spawned process so megatron-core's process-global parallel state
ends with it: one GRPO step through the config check, the Megatron actor and reference, the hand-off to the HF
rollout and the update (the actor's weights move and the rollout samples from the updated ones afterwards); and two
GAE steps (the critic's values, the critic and actor updates, a checkpoint of both at step 2 in the Megatron engine's
layout). And the command lines themselves on two Ray workers at tensor parallel 2 (slow): two steps and a checkpoint.
"""

from __future__ import annotations

import json
import math

import pytest
import torch

pytest.importorskip("megatron.core", reason="megatron-core is not installed (pip install -e .[megatron])")

from tests.gloo_ranks import spawn_gloo_ranks  # noqa: E402
from tests.trainer.ppo_e2e_utils import (  # noqa: E402
    base_overrides,
    compose_config,
    make_workspace,
    parse_console_metrics,
    run_main_ppo,
    write_reward_fn,
)


def _in_process_trainer(ws: dict, estimator: str, steps: int, extra: list[str]):
    """The trainer of the scaled-down command line on the in-process worker group, its workers built."""
    from verl.single_controller.inprocess import InProcessWorkerGroup
    from verl.trainer.main_ppo import build_trainer, prepare_config

    overrides = base_overrides(ws, estimator, steps=steps) + [
        "trainer.n_gpus_per_node=1",
        "trainer.resume_mode=disable",
        f"custom_reward_function.path={ws['reward']}",
        "trainer.run_report=False",
        *extra,
    ]
    config = compose_config(overrides, "ppo_megatron_trainer")
    prepare_config(config)  # the driver's config check: accepts this configuration
    trainer = build_trainer(config, ray_worker_group_cls=InProcessWorkerGroup)
    trainer.init_workers()
    return trainer


def _one_grpo_step(rank: int, ws: dict, out: str) -> None:
    trainer = _in_process_trainer(ws, "grpo", 1, [])
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


def _two_gae_steps(rank: int, ws: dict, out: str) -> None:
    trainer = _in_process_trainer(ws, "gae", 2, ["trainer.save_freq=2", "critic.optim.lr=1e-2"])
    critic = trainer.critic_wg.workers[0].worker_dict["critic"]
    before = {name: t.clone() for name, t in critic.engine.hf_weights()}
    trainer.fit()
    after = {name: t.clone() for name, t in critic.engine.hf_weights()}
    result = {
        "engine": type(critic.engine).__name__,
        "kind": critic.engine.kind,
        "moved": max((after[k] - before[k]).abs().max().item() for k in after),
        "global_steps": trainer.global_steps,
    }
    with open(out, "w") as f:
        json.dump(result, f)


def _spawned(tmp_path, body) -> dict:
    ws = make_workspace(tmp_path)
    ws["reward"] = write_reward_fn(tmp_path)
    out = str(tmp_path / "result.json")
    spawn_gloo_ranks(body, 1, ws, out)
    with open(out) as f:
        return json.load(f)


def test_megatron_grpo_step_in_process(tmp_path):
    result = _spawned(tmp_path, _one_grpo_step)
    assert result["engine"] == "MegatronEngine"
    assert result["moved"] > 1e-4 and result["rollout_is_current"], result


def test_megatron_gae_two_steps_in_process(tmp_path):
    result = _spawned(tmp_path, _two_gae_steps)
    assert result["engine"] == "MegatronEngine" and result["kind"] == "value", result
    assert result["moved"] > 1e-4 and result["global_steps"] == 3, result  # the counter is past the 2 steps done
    for role in ("actor", "critic"):
        saved = tmp_path / "ckpt" / "global_step_2" / role
        assert (saved / "dist_ckpt" / ".metadata").is_file() and (saved / "megatron_config.json").is_file()


def _tp2_command_line(tmp_path, estimator: str, step_keys: tuple[str, ...], roles: tuple[str, ...]) -> None:
    """The scaled-down command line on two Ray workers at tensor parallel 2 (every Megatron role): two steps whose
    ``step_keys`` metrics are finite, and each of ``roles`` saved at step 2, one shard per rank."""
    from verl.demo.tiny_model import make_tiny_model_dir

    ws = make_workspace(tmp_path)
    model = make_tiny_model_dir(str(tmp_path / "model_kv2"))  # 2 key-value heads: one per tensor-parallel rank
    critic = make_tiny_model_dir(str(tmp_path / "critic_kv2"), head="token_classification")
    overrides = ["--config-name", "ppo_megatron_trainer"] + base_overrides(ws, estimator, steps=2)
    overrides += [
        f"actor_rollout_ref.model.path={model}",
        f"critic.model.path={critic}",
        f"custom_reward_function.path={write_reward_fn(tmp_path)}",
        "trainer.resume_mode=disable",
        "trainer.save_freq=2",
    ]
    for section in ("actor_rollout_ref.actor", "critic"):  # sequence_parallel=True, the YAML's default, applies
        overrides.append(f"{section}.megatron.tensor_model_parallel_size=2")
    result = run_main_ppo(overrides, cwd=str(tmp_path))
    assert result.returncode == 0, result.stderr[-4000:]
    steps = [s for s in parse_console_metrics(result.stdout) if "training/global_step" in s]
    assert [int(s["step"]) for s in steps] == [1, 2]
    for step in steps:
        for key in step_keys:
            assert math.isfinite(step[key]), key
    for role in roles:
        saved = tmp_path / "ckpt" / "global_step_2" / role
        # megatron-core's distributed checkpoint, written by both ranks, and each rank's RNG states
        assert len(list((saved / "dist_ckpt").glob("*.distcp"))) >= 2
        assert sorted(p.name for p in saved.glob("extra_state_world_size_2_rank_*.pt")) == [
            "extra_state_world_size_2_rank_0.pt",
            "extra_state_world_size_2_rank_1.pt",
        ]


@pytest.mark.slow
def test_megatron_command_line_tp2_on_two_ray_workers(tmp_path):
    keys = ("timing_s/reshard", "actor/pg_loss", "actor/grad_norm", "critic/score/mean")
    _tp2_command_line(tmp_path, "grpo", keys, ("actor",))


@pytest.mark.slow
def test_megatron_gae_command_line_tp2_on_two_ray_workers(tmp_path):
    keys = ("actor/pg_loss", "critic/vf_loss", "critic/grad_norm", "critic/values/mean")
    _tp2_command_line(tmp_path, "gae", keys, ("actor", "critic"))
    from verl.workers.engine.megatron.checkpoint import read_model_tensors

    head = read_model_tensors(str(tmp_path / "ckpt" / "global_step_2" / "critic" / "dist_ckpt"))
    assert head["output_layer.weight"].shape == (1, 64)  # the critic's scalar head
