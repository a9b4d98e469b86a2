"""The reward's keys spelled verl 0.9's way (``reward.*``), verl 0.7's way (``reward_model.reward_loop_*``,
``reward_model.rollout.*``), with verl 0.9's legacy top-level ``sandbox_fusion`` or as verl's sandbox script spells
the URL, all mean the key the runtime reads: each set spelling lands there, two different values are refused naming
both, verl 0.9's twins read the run's value, and a verl v0.4.1 command line builds what it built before."""

from __future__ import annotations

import copy
import dataclasses
import types
import typing

import pytest
from omegaconf import OmegaConf

from tests.trainer.ppo_e2e_utils import compose_config
from tests.workers.reward_manager.conftest import make_batch, tokenizer  # noqa: F401 - fixtures
from verl.trainer.config import ConfigError, PPOConfig
from verl.trainer.config.reward_spellings import SPELLINGS, spellings_of
from verl.utils.config import omega_conf_to_dataclass
from verl.workers.config.reward import CustomRewardFunctionConfig, RewardModelConfig

_COMPOSED = compose_config([])


def typed(overrides=()) -> PPOConfig:
    return PPOConfig.from_config(compose_config(list(overrides)))


def typed_with(values: dict) -> PPOConfig:
    """The composed defaults with ``values`` (dotted key -> value) set, built (faster than composing each case)."""
    config = copy.deepcopy(_COMPOSED)
    for key, value in values.items():
        OmegaConf.update(config, key, value, merge=False)
    return PPOConfig.from_config(config)


def _get(node, key: str):
    for part in key.split("."):
        node = getattr(node, part)
    return node


def _annotation(key: str):
    """The type of the typed field at ``key`` (its non-None type where it may be None)."""
    parent_key, _, leaf = key.rpartition(".")
    parent = _get(PPOConfig(), parent_key) if parent_key else PPOConfig()
    hint = typing.get_type_hints(type(parent))[leaf]
    if typing.get_origin(hint) in (typing.Union, types.UnionType):
        hint = next(arg for arg in typing.get_args(hint) if arg is not type(None))
    return typing.get_origin(hint) or hint


_SAMPLES = {bool: None, int: 3, float: 0.25, str: "/spelled/elsewhere", list: [1, 2], dict: {"k": 1}}


def _sample(key: str, home: str):
    """A value for ``key`` that neither it nor ``home`` has by default."""
    kind = _annotation(home)
    if kind is bool:
        return not _get(PPOConfig(), home)
    value = _SAMPLES[kind]
    return value + 1 if value == _get(PPOConfig(), home) else value


@pytest.mark.parametrize("spelling", SPELLINGS, ids=lambda s: s.key)
def test_each_spelling_lands_on_the_key_the_runtime_reads(spelling):
    value = _sample(spelling.key, spelling.home)
    config = typed_with({spelling.key: value})
    assert _get(config, spelling.home) == value, (spelling.home, _get(config, spelling.home))
    if spelling.mirror:  # verl 0.9's twin reads the run's value too
        assert _get(config, spelling.key) == value
    # the same value in both places is one setting, not a clash
    assert _get(typed_with({spelling.key: value, spelling.home: value}), spelling.home) == value


def _other(value):
    """A second value of ``value``'s type."""
    if isinstance(value, dict):
        return {"k": 2}
    if isinstance(value, list):
        return [3]
    return value + "-other" if isinstance(value, str) else value + 1


@pytest.mark.parametrize("spelling", [s for s in SPELLINGS if _annotation(s.home) is not bool], ids=lambda s: s.key)
def test_two_spellings_set_to_different_values_are_refused(spelling):
    # (a flag differs from its default one way only: two spellings of it cannot disagree)
    value = _sample(spelling.key, spelling.home)
    with pytest.raises(ConfigError) as err:
        typed_with({spelling.key: value, spelling.home: _other(value)})
    assert f"{spelling.key}=" in str(err.value) and f"{spelling.home}=" in str(err.value), str(err.value)


def test_the_sandbox_url_has_four_spellings():
    url = "http://sandbox:8080/run_code"
    home = "reward_model.sandbox_fusion.url"
    assert set(spellings_of(home)) == {
        "reward.sandbox_fusion.url",
        "sandbox_fusion.url",
        "reward_model.sandbox_fusion_url",
    }
    for key in spellings_of(home):
        assert typed([f"{key}={url}"]).reward_model.sandbox_fusion.url == url
    # all of them agreeing is fine; any one disagreeing is named
    assert typed([f"{k}={url}" for k in (home, *spellings_of(home))]).reward_model.sandbox_fusion.url == url
    with pytest.raises(ConfigError, match=r"sandbox_fusion\.url='http://other'.*reward_model\.sandbox_fusion_url="):
        typed(["sandbox_fusion.url=http://other", f"reward_model.sandbox_fusion_url={url}"])


def test_a_verl_041_command_line_builds_what_it_built_before():
    """Resolving changes nothing in the v0.4 sections when only v0.4 keys are set: the typed sections equal a plain
    build of the composed YAML's v0.4 nodes, defaults and overrides alike."""
    v04 = ["reward_model.enable=True", "reward_model.model.path=/rm", "custom_reward_function.path=/f"]
    for overrides in ([], v04):
        composed = compose_config(overrides)
        config = PPOConfig.from_config(composed)
        assert config.reward_model == omega_conf_to_dataclass(composed.reward_model, RewardModelConfig)
        plain = omega_conf_to_dataclass(composed.custom_reward_function, CustomRewardFunctionConfig)
        assert config.custom_reward_function == plain
        assert config.reward_model.use_reward_loop is False  # the reward-model worker, as in verl v0.4


@pytest.mark.parametrize(
    ("v09", "v04"),
    [
        (
            ["reward.reward_model.enable=True", "reward.reward_model.model_path=/rm"],
            ["reward_model.enable=True", "reward_model.model.path=/rm"],
        ),
        (
            ["reward.custom_reward_function.path=/fn.py", "reward.custom_reward_function.name=score"],
            ["custom_reward_function.path=/fn.py", "custom_reward_function.name=score"],
        ),
        (
            [
                "reward.reward_model.enable=True",
                "reward.reward_model.model_path=/rm",
                "reward.reward_model.rollout.name=hf",
                "reward.reward_model.rollout.tensor_model_parallel_size=1",
                "reward.num_workers=2",
                "reward.reward_manager.name=batch",
            ],
            [
                "reward_model.enable=True",
                "reward_model.model.path=/rm",
                "reward_model.rollout.name=hf",
                "reward_model.rollout.tensor_model_parallel_size=1",
                "reward_model.num_workers=2",
                "reward_model.reward_manager=batch",
            ],
        ),
    ],
    ids=["reward_model_worker", "custom_reward_function", "served_reward_model"],
)
def test_a_verl_09_command_line_means_the_v04_spelling(v09, v04):
    new, old = typed(v09), typed(v04)
    assert new.reward_model == old.reward_model
    assert new.custom_reward_function == old.custom_reward_function
    assert new.reward == old.reward  # the twins read the same values either way


def test_a_reward_model_that_names_its_engine_is_served_by_the_reward_loop():
    """verl 0.7 and later: enable=True with rollout.name is the served model (the reward loop is on by default
    there); without rollout.name, verl v0.4's reward-model worker."""
    served = typed(["reward_model.enable=True", "reward_model.rollout.name=hf"])
    assert served.reward_model.use_reward_loop is True
    v09 = typed(["reward.reward_model.enable=True", "reward.reward_model.rollout.name=vllm"])
    assert v09.reward_model.use_reward_loop is True
    assert typed(["reward_model.enable=True"]).reward_model.use_reward_loop is False
    assert typed(["reward_model.rollout.name=hf"]).reward_model.use_reward_loop is False  # nothing to serve


def test_verl_07_reward_loop_manager_keys_name_the_source_module_and_class():
    config = typed(
        [
            "reward_model.reward_loop_source=importlib",
            "reward_model.reward_loop_module_path=/managers.py",
            "reward_model.reward_loop_class_name=MyManager",
        ]
    )
    manager = config.reward.reward_manager
    assert (manager.source, manager.module.path, config.reward_model.reward_manager) == (
        "importlib",
        "/managers.py",
        "MyManager",
    )
    assert manager.name == "MyManager"


def test_every_spelling_names_a_yaml_key_and_a_typed_field():
    composed = compose_config([])
    for spelling in SPELLINGS:
        for key in (spelling.key, spelling.home):
            assert OmegaConf.select(composed, key, default="<absent>") != "<absent>", key
            _get(PPOConfig(), key)
    homes = {s.home for s in SPELLINGS}
    assert not homes & {s.key for s in SPELLINGS}, "a home is itself an alias"


def _manager_file(tmp_dir: str) -> str:
    """A file defining a manager with the registered managers' interface: the naive manager's reward, halved."""
    path = f"{tmp_dir}/my_managers.py"
    with open(path, "w") as f:
        f.write(
            "from verl.workers.reward_manager import NaiveRewardManager\n\n\n"
            "class HalfRewardManager(NaiveRewardManager):\n"
            "    def __call__(self, data, return_dict=False):\n"
            "        out = super().__call__(data, return_dict=True)\n"
            "        out['reward_tensor'] = out['reward_tensor'] / 2\n"
            "        return out if return_dict else out['reward_tensor']\n"
        )
    return path


@pytest.mark.parametrize("spelling", ["verl_09", "verl_07"])
def test_an_importlib_manager_is_loaded_from_its_file(tmp_path, spelling, tokenizer, make_batch):  # noqa: F811
    import sys

    from verl.trainer.ppo.reward import compute_reward, load_reward_manager

    path = _manager_file(str(tmp_path))
    overrides = {
        "verl_09": [
            "reward.reward_manager.source=importlib",
            "reward.reward_manager.name=HalfRewardManager",
            f"reward.reward_manager.module.path={path}",
            "reward.reward_manager.module.name=my_managers_09",
        ],
        "verl_07": [
            "reward_model.reward_loop_source=importlib",
            "reward_model.reward_loop_class_name=HalfRewardManager",
            f"reward_model.reward_loop_module_path={path}",
        ],
    }[spelling]
    config = typed(overrides)
    manager = load_reward_manager(config, tokenizer, num_examine=0)
    assert type(manager).__name__ == "HalfRewardManager"
    module = "my_managers_09" if spelling == "verl_09" else "custom_reward_manager"
    assert sys.modules[module].HalfRewardManager is type(manager)  # importable by that name (Ray unpickles it)
    batch = make_batch(["1+1=", "2+2="], ["#### 2", "#### 5"], ["2", "4"], data_sources=["openai/gsm8k"] * 2)
    reward, _ = compute_reward(batch, manager)
    assert reward.sum(-1).tolist() == [0.5, 0.0]  # the gsm8k rule's 1.0 and 0.0, halved
    with pytest.raises(AttributeError, match=r"reward_model.reward_manager \(reward.reward_manager.name\)='Nope'"):
        load_reward_manager(typed([*overrides[:1], f"reward.reward_manager.module.path={path}",
                                   "reward_model.reward_manager=Nope"]), tokenizer, 0)  # fmt: skip


def test_the_sandbox_settings_of_any_spelling_reach_the_default_scorer():
    from verl.trainer.ppo.reward import _default_scoring_fn

    url = "http://sandbox:8080/run_code"
    for prefix in ("reward_model.sandbox_fusion.", "reward.sandbox_fusion.", "sandbox_fusion."):
        scorer = _default_scoring_fn(typed([f"{prefix}url={url}", f"{prefix}memory_limit_mb=256"]))
        assert scorer.keywords["sandbox_fusion_url"] == url, prefix
        assert scorer.keywords["memory_limit_mb"] == 256, prefix
    scorer = _default_scoring_fn(typed([f"reward_model.sandbox_fusion_url={url}"]))  # verl's sandbox script
    assert scorer.keywords["sandbox_fusion_url"] == url and scorer.keywords["memory_limit_mb"] == 1024


def test_the_typed_fields_of_the_reward_section_mirror_verl_09():
    """verl 0.9's RewardConfig, RewardManagerConfig, SandboxFusionConfig and its RewardModelConfig (here
    ServedRewardModelConfig) keys, each a field."""
    config = PPOConfig()
    assert {f.name for f in dataclasses.fields(config.reward)} >= {
        "num_workers",
        "custom_reward_function",
        "reward_manager",
        "reward_model",
        "sandbox_fusion",
    }
    assert {f.name for f in dataclasses.fields(config.reward.reward_model)} == {
        "enable",
        "enable_resource_pool",
        "n_gpus_per_node",
        "nnodes",
        "model_path",
        "rollout",
    }
