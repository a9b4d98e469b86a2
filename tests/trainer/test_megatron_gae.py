"""PPO with a critic (GAE) on the Megatron backend: verl's ``--config-name ppo_megatron_trainer`` command line, scaled
down to the tiny model, with actor, reference and critic all ``strategy=megatron``.

In-process worker group (world size 1), in a spawned process so megatron-core's process-global parallel state ends
with it: two steps through the config check, the critic's values, GAE, the critic and actor updates and a checkpoint
of both at step 2 in the Megatron engine's layout. And the command line itself on two Ray workers at tensor parallel
2 (slow).
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


def _two_gae_steps(rank: int, ws: dict, out: str) -> None:
    from verl.single_controller.inprocess import InProcessWorkerGroup
    from verl.trainer.main_ppo import build_trainer, prepare_config

    overrides = base_overrides(ws, "gae", steps=2) + [
        "trainer.n_gpus_per_node=1",
        "trainer.resume_mode=disable",
        "trainer.save_freq=2",
        "critic.optim.lr=1e-2",
        f"custom_reward_function.path={ws['reward']}",
        "trainer.run_report=False",
    ]
    config = compose_config(overrides, "ppo_megatron_trainer")
    prepare_config(config)  # the driver's config check: accepts a Megatron critic beside the Megatron actor
    trainer = build_trainer(config, ray_worker_group_cls=InProcessWorkerGroup)
    trainer.init_workers()
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


def test_megatron_gae_two_steps_in_process(tmp_path):
    ws = make_workspace(tmp_path)
    ws["reward"] = write_reward_fn(tmp_path)
    out = str(tmp_path / "result.json")
    spawn_gloo_ranks(_two_gae_steps, 1, ws, out)
    with open(out) as f:
        result = json.load(f)
    assert result["engine"] == "MegatronEngine" and result["kind"] == "value", result
    assert result["moved"] > 1e-4 and result["global_steps"] == 3, result  # 2 steps done
    for role in ("actor", "critic"):
        saved = tmp_path / "ckpt" / "global_step_2" / role
        assert (saved / "model_world_size_1_rank_0.pt").is_file() and (saved / "megatron_config.json").is_file()


@pytest.mark.slow
def test_megatron_gae_command_line_tp2_on_two_ray_workers(tmp_path):
    from verl.demo.tiny_model import make_tiny_model_dir

    ws = make_workspace(tmp_path)
    kv2 = {"hidden_size": 32, "num_layers": 1, "num_heads": 2, "num_kv_heads": 2, "intermediate_size": 64}
    model = make_tiny_model_dir(str(tmp_path / "model_kv2"), **kv2)  # 2 key-value heads: one per tp rank
    critic = make_tiny_model_dir(str(tmp_path / "critic_kv2"), head="token_classification", **kv2)
    overrides = ["--config-name", "ppo_megatron_trainer"] + base_overrides(ws, "gae", steps=2)
    overrides += [
        f"actor_rollout_ref.model.path={model}",
        f"critic.model.path={critic}",
        f"custom_reward_function.path={write_reward_fn(tmp_path)}",
        "trainer.resume_mode=disable",
        "trainer.save_freq=2",
    ]
    for section in ("actor_rollout_ref.actor", "critic"):
        overrides += [f"{section}.megatron.tensor_model_parallel_size=2", f"{section}.megatron.sequence_parallel=False"]
    overrides += ["actor_rollout_ref.ref.megatron.sequence_parallel=False"]
    result = run_main_ppo(overrides, cwd=str(tmp_path))
    assert result.returncode == 0, result.stderr[-4000:]
    steps = [s for s in parse_console_metrics(result.stdout) if "training/global_step" in s]
    assert [int(s["step"]) for s in steps] == [1, 2]
    for step in steps:
        for key in ("actor/pg_loss", "critic/vf_loss", "critic/grad_norm", "critic/values/mean"):
            assert math.isfinite(step[key]), key
    saved = tmp_path / "ckpt" / "global_step_2" / "critic"
    assert sorted(p.name for p in saved.glob("model_world_size_2_rank_*.pt")) == [
        "model_world_size_2_rank_0.pt",
        "model_world_size_2_rank_1.pt",
    ]
    assert torch.load(saved / "model_world_size_2_rank_0.pt")["output_layer.weight"].shape == (1, 32)
