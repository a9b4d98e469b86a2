"""The typed PPO config mirrors ppo_trainer.yaml: every YAML key is a field with the YAML's default, every field
the YAML lacks is a documented hidden key, and bad keys or values fail with their names."""

from __future__ import annotations

import pytest
from hydra.errors import ConfigCompositionException
from omegaconf import OmegaConf

from tests.trainer.config.yaml_mirror import assert_no_extra_keys, compose_config, yaml_mirror_problems
from verl.trainer.config import ActorConfig, ActorRolloutRefConfig, PPOConfig


def _compose(overrides=()):
    return compose_config("ppo_trainer", overrides)


def test_every_dataclass_default_equals_the_yaml():
    problems = yaml_mirror_problems(PPOConfig, "ppo_trainer")
    assert not problems, "\n".join(problems)


def test_default_yaml_builds_with_no_extra_keys():
    cfg = PPOConfig.from_config(_compose())
    assert_no_extra_keys(cfg)
    assert cfg.actor_rollout_ref.actor.optim.lr == pytest.approx(1e-6)
    assert cfg.critic.rollout_n == cfg.actor_rollout_ref.rollout.n  # interpolations are resolved


def test_an_unknown_key_is_an_error_that_names_it():
    with pytest.raises(ConfigCompositionException, match="actor_rollout_ref.actor.clip_ratioo"):
        _compose(["actor_rollout_ref.actor.clip_ratioo=0.3"])
    bad = OmegaConf.create({"actor": {"clip_ratioo": 0.3}})
    with pytest.raises(TypeError, match=r"actor\.clip_ratioo"):
        from verl.utils.config import omega_conf_to_dataclass

        omega_conf_to_dataclass(bad, ActorRolloutRefConfig)


def test_plus_overrides_keep_working_as_extra_keys():
    cfg = PPOConfig.from_config(
        _compose(["+actor_rollout_ref.actor.my_recipe_coef=0.5", "+algorithm.my_recipe.enable=True"])
    )
    assert cfg.actor_rollout_ref.actor.my_recipe_coef == 0.5
    assert cfg.actor_rollout_ref.actor.get("my_recipe_coef") == 0.5
    assert cfg.algorithm.my_recipe.enable is True  # a nested extra section reads as it did on the DictConfig
    assert cfg.algorithm.to_dict()["my_recipe"] == {"enable": True}
    # a key verl reads with a code default is a declared field with a YAML entry: its type is checked
    cfg = PPOConfig.from_config(_compose(["data.gen_batch_size=64", "actor_rollout_ref.rollout.seed=3"]))
    assert cfg.data.gen_batch_size == 64 and cfg.data.generation_batch_size == 64
    assert cfg.actor_rollout_ref.rollout.seed == 3
    cfg = PPOConfig.from_config(_compose(["algorithm.filter_groups.enable=True"]))
    assert cfg.algorithm.filter_groups.to_dict() == {
        "enable": True,
        "metric": None,
        "max_num_gen_batches": 0,
        "max_inflight_gen_batches": 1,
    }
    with pytest.raises(TypeError, match=r"algorithm\.filter_groups\.max_num_gen_batches='ten'"):
        PPOConfig.from_config(_compose(["algorithm.filter_groups.max_num_gen_batches=ten"]))


def test_a_value_of_the_wrong_type_names_the_key():
    with pytest.raises(TypeError, match=r"data\.train_batch_size='many'"):
        PPOConfig.from_config(_compose(["data.train_batch_size=many"]))
    with pytest.raises(TypeError, match=r"actor_rollout_ref\.actor\.use_kl_loss=3"):
        PPOConfig.from_config(_compose(["actor_rollout_ref.actor.use_kl_loss=3"]))


def test_sections_read_like_the_dictconfig_they_replace():
    actor = PPOConfig.from_config(_compose()).actor_rollout_ref.actor
    assert isinstance(actor, ActorConfig)
    assert actor["clip_ratio"] == actor.get("clip_ratio") == actor.clip_ratio == 0.2
    assert "policy_loss" in actor and actor.policy_loss.get("loss_mode") == "vanilla"
    assert actor.clip_range == (0.2, 0.2)
    assert OmegaConf.create(actor.to_dict()).optim.lr == actor.optim.lr


def test_check_ppo_config_reports_a_wrong_type_as_a_config_error():
    from verl.trainer.config import ConfigError
    from verl.trainer.config.checks.ppo import check_ppo_config

    with pytest.raises(ConfigError, match=r"critic\.ppo_epochs='two'"):
        overrides = ["critic.ppo_epochs=two", "actor_rollout_ref.rollout.name=hf"]
        check_ppo_config(_compose(overrides), check_paths=False, check_device=False)


def test_workers_take_a_private_typed_copy():
    """The in-process group hands the trainer's own section object to the worker, which rewrites batch sizes to
    per-rank values: the worker must work on a copy, typed whatever the recipe passed."""
    from verl.workers.roles.base import typed_section

    section = PPOConfig.from_config(_compose()).actor_rollout_ref
    copy = typed_section(section, ActorRolloutRefConfig)
    copy.actor.ppo_mini_batch_size = 1
    assert section.actor.ppo_mini_batch_size == 256 and copy is not section
    from_dict = typed_section(_compose().actor_rollout_ref, ActorRolloutRefConfig)
    assert isinstance(from_dict, ActorRolloutRefConfig) and from_dict == section


def test_ray_init_kwargs_skip_the_dashboard_on_cpu_unless_asked():
    from verl.trainer.main_ppo import ray_init_kwargs

    cpu = ray_init_kwargs(_compose(["trainer.device=cpu", "trainer.n_gpus_per_node=3"]))
    assert cpu["include_dashboard"] is False and cpu["num_cpus"] >= 4
    assert ray_init_kwargs(_compose(["trainer.device=cpu", "ray_init.include_dashboard=True"]))["include_dashboard"]
    gpu = ray_init_kwargs(_compose(["trainer.device=cuda"]))
    assert "include_dashboard" not in gpu and gpu["num_cpus"] is None


def test_ray_init_kwargs_join_a_running_cluster_without_resource_arguments(monkeypatch):
    """With RAY_ADDRESS (a cluster started with `ray start`), ray.init refuses num_cpus and include_dashboard."""
    from verl.trainer.main_ppo import ray_init_kwargs

    monkeypatch.setenv("RAY_ADDRESS", "127.0.0.1:6379")
    kwargs = ray_init_kwargs(_compose(["trainer.device=cpu", "trainer.n_gpus_per_node=3"]))
    assert set(kwargs) == {"runtime_env"} and kwargs["runtime_env"]["env_vars"]
    # without RAY_ADDRESS (or with "local") the job starts a cluster of its own, never a stale one from `ray start`
    monkeypatch.setenv("RAY_ADDRESS", "local")
    assert ray_init_kwargs(_compose(["trainer.device=cpu"]))["address"] == "local"
    monkeypatch.delenv("RAY_ADDRESS")
    assert ray_init_kwargs(_compose(["trainer.device=cpu"]))["address"] == "local"


class _FakeRay:
    """Just what ``train_in_ray`` calls: records ``init`` and the remote TaskRunner's ``run``."""

    def __init__(self, initialized: bool):
        self.initialized, self.init_calls, self.remote_runs = initialized, [], []

    def is_initialized(self):
        return self.initialized

    def init(self, **kwargs):
        self.init_calls.append(kwargs)

    def get(self, ref):
        return ref


@pytest.mark.parametrize(
    ("address", "initialized", "runs_here"),
    [(None, False, True), ("local", False, True), ("127.0.0.1:6379", False, False), (None, True, False)],
)
def test_the_controller_runs_in_the_driver_only_on_a_cluster_it_starts(monkeypatch, address, initialized, runs_here):
    """A local cluster ends with the driver, so the controller runs there (no TaskRunner process); a running cluster
    (RAY_ADDRESS, or Ray initialised by the caller) gets verl's TaskRunner actor."""
    import sys
    from types import SimpleNamespace

    from verl.trainer import main_ppo

    fake = _FakeRay(initialized)
    monkeypatch.setitem(sys.modules, "ray", fake)
    if address is None:
        monkeypatch.delenv("RAY_ADDRESS", raising=False)
    else:
        monkeypatch.setenv("RAY_ADDRESS", address)
    here = []
    monkeypatch.setattr(main_ppo, "_run_controller_here", lambda config, classes: here.append(classes))

    class Runner:
        run = SimpleNamespace(remote=lambda config, **classes: fake.remote_runs.append(classes))

    monkeypatch.setattr(main_ppo, "_task_runner_class", lambda: SimpleNamespace(remote=lambda: Runner))
    main_ppo.train_in_ray(_compose(["trainer.device=cpu"]), trainer_cls="T")
    assert (here, fake.remote_runs) == (([{"trainer_cls": "T"}], []) if runs_here else ([], [{"trainer_cls": "T"}]))
    # on a cluster of its own the driver starts Ray inside _run_controller_here, after building the datasets
    assert len(fake.init_calls) == (0 if initialized or runs_here else 1)
