"""verl 0.9's trainer-wide keys: a key spelled two ways means one setting, the profiler tools other than
torch.profiler and the trainer features not here are refused before Ray, naming the key and what to do instead."""

from __future__ import annotations

import pytest

from tests.trainer.ppo_e2e_utils import compose_config
from verl.trainer.config import ConfigError, PPOConfig
from verl.trainer.config.checks.trainer_keys import check_trainer_keys
from verl.trainer.config.checks.unsupported_keys import check_unsupported_keys
from verl.trainer.config.trainer import profile_steps, ray_init_options
from verl.trainer.main_ppo import ray_init_kwargs


def _typed(*overrides) -> PPOConfig:
    return PPOConfig.from_config(compose_config(list(overrides)))


def test_ray_kwargs_is_ray_init_under_verl_09s_name():
    new = ray_init_options(_typed("ray_kwargs.ray_init.num_cpus=6", "ray_kwargs.timeline_json_file=/tmp/t.json"))
    old = ray_init_options(_typed("ray_init.num_cpus=6", "ray_init.timeline_json_file=/tmp/t.json"))
    assert (new.num_cpus, new.timeline_json_file) == (old.num_cpus, old.timeline_json_file) == (6, "/tmp/t.json")
    assert ray_init_kwargs(compose_config(["ray_kwargs.ray_init.num_cpus=6", "trainer.device=cpu"]))["num_cpus"] == 6
    both = _typed("ray_init.num_cpus=6", "ray_kwargs.ray_init.num_cpus=6")
    check_trainer_keys(both)  # the same value under both names is one setting
    with pytest.raises(ConfigError, match=r"ray_init.num_cpus=6 and ray_kwargs.ray_init.num_cpus=4"):
        check_trainer_keys(_typed("ray_init.num_cpus=6", "ray_kwargs.ray_init.num_cpus=4"))


def test_py_executable_goes_into_rays_runtime_env(monkeypatch):
    monkeypatch.delenv("RAY_ADDRESS", raising=False)
    kwargs = ray_init_kwargs(compose_config(["ray_kwargs.ray_init.runtime_env.py_executable='uv run --frozen'"]))
    assert kwargs["runtime_env"]["py_executable"] == "uv run --frozen" and "env_vars" in kwargs["runtime_env"]
    assert "py_executable" not in ray_init_kwargs(compose_config([]))["runtime_env"]
    monkeypatch.setenv("RAY_ADDRESS", "10.0.0.1:6379")  # joining a cluster keeps it too
    joined = ray_init_kwargs(compose_config(["ray_kwargs.ray_init.runtime_env.py_executable=/venv/bin/python"]))
    assert list(joined) == ["runtime_env"] and joined["runtime_env"]["py_executable"] == "/venv/bin/python"


def test_profile_steps_under_either_name():
    assert profile_steps(_typed("global_profiler.steps=[3]")) == profile_steps(_typed("trainer.profile_steps=[3]"))
    with pytest.raises(ConfigError, match=r"trainer.profile_steps=\[3\] and global_profiler.steps=\[4\]"):
        check_trainer_keys(_typed("trainer.profile_steps=[3]", "global_profiler.steps=[4]"))


@pytest.mark.parametrize("tool", ["nsys", "npu", "torch_memory", "precision_debugger"])
def test_profiler_tools_other_than_torch_are_refused(tool):
    for key in ("global_profiler.tool", "critic.profiler.tool"):
        with pytest.raises(ConfigError, match=f"{key}='{tool}': only torch.profiler runs here"):
            check_trainer_keys(_typed(f"{key}={tool}"))
    check_trainer_keys(_typed("global_profiler.tool=torch"))
    # a role's tool follows the global one
    assert _typed("global_profiler.tool=torch").actor_rollout_ref.ref.profiler.tool == "torch"


def test_unknown_torch_contents_are_refused():
    with pytest.raises(ConfigError, match=r"contents=\['npu'\]"):
        check_trainer_keys(_typed("actor_rollout_ref.actor.profiler.tool_config.torch.contents=[npu]"))
    check_trainer_keys(_typed("actor_rollout_ref.actor.profiler.tool_config.torch.contents=[cuda,shapes]"))


@pytest.mark.parametrize("value", ["auto", "enable", "disable"])
def test_verl_07_worker_choice_runs_the_one_implementation(value):
    check_trainer_keys(_typed(f"trainer.use_legacy_worker_impl={value}"))


def test_an_unknown_worker_choice_is_refused():
    with pytest.raises(ConfigError, match="trainer.use_legacy_worker_impl='legacy'"):
        check_trainer_keys(_typed("trainer.use_legacy_worker_impl=legacy"))


def test_chat_template_kwargs_are_refused_where_an_agent_loop_renders_the_prompt_again():
    kwargs = "+data.apply_chat_template_kwargs.enable_thinking=False"
    check_trainer_keys(_typed(kwargs))  # the synchronous single-turn rollout takes the dataset's prompt
    for rollout in ("actor_rollout_ref.rollout.mode=async", "actor_rollout_ref.rollout.multi_turn.enable=True"):
        with pytest.raises(ConfigError, match="apply_chat_template_kwargs"):
            check_trainer_keys(_typed(kwargs, rollout))


@pytest.mark.parametrize(
    ("override", "named"),
    [
        ("trainer.v1.trainer_mode=separate_async", "trainer.v1.trainer_mode='separate_async'"),
        ("trainer.v1.separate_async.hybrid_rollout.enable_switch=True", "trainer.v1.separate_async="),
        ("skip.rollout.enable=True", "skip.rollout="),
        ("transfer_queue.enable=True", "transfer_queue="),
        ("global_profiler.global_tool_config.torch_memory.stack_depth=8", "global_profiler.global_tool_config="),
        ("critic.profiler.tool_config.torch.schedule.active=2", "critic.profiler.tool_config.torch.schedule="),
        ("data.function_tool_path=tools.py", "data.function_tool_path='tools.py'"),
        ("data.return_multi_modal_inputs=False", "data.return_multi_modal_inputs=False"),
        ("algorithm.filter_groups.max_inflight_gen_batches=2", "algorithm.filter_groups.max_inflight_gen_batches=2"),
    ],
)
def test_features_not_here_are_refused_when_changed(override, named):
    problems = check_unsupported_keys(_typed(override))
    assert len(problems) >= 1 and any(p.startswith(named) for p in problems), problems


def test_verl_09_defaults_pass():
    cfg = _typed()
    check_trainer_keys(cfg)
    assert check_unsupported_keys(cfg) == []
    assert (cfg.trainer.use_v1, cfg.trainer.v1.trainer_mode, cfg.global_profiler.tool) == (True, "sync", None)
