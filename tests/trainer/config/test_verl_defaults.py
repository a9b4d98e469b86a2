"""A verl command line means the same run here: every shipped YAML carries verl v0.4.1's default for every key verl
has, and every example script composes to the config it would compose to in verl."""

import os
import re

import pytest
import yaml
from omegaconf import DictConfig, ListConfig, OmegaConf

from verl.demo.default_run import DEMO_VALUES, apply_builtin_demo, command_line_keys
from verl.trainer.config.migration import CHANGED_DEFAULTS

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))
CONFIG_DIR = os.path.join(ROOT, "verl", "trainer", "config")
with open(os.path.join(os.path.dirname(os.path.abspath(__file__)), "verl_v041_defaults.yaml")) as f:
    VERL_DEFAULTS: dict[str, dict] = yaml.safe_load(f)

# the configs whose defaults follow today's verl (the others keep v0.4.1's layout and defaults)
MOVED_IN = {"ppo_trainer.yaml", "ppo_megatron_trainer.yaml"}

# entry module of a script -> the config it composes
ENTRY_CONFIGS = {
    "verl.trainer.main_ppo": "ppo_trainer.yaml",
    "verl.trainer.fsdp_sft_trainer": "sft_trainer.yaml",
    "verl.trainer.main_generation": "generation.yaml",
    "verl.trainer.main_eval": "evaluation.yaml",
}
_ENTRY = re.compile(r"-m\s+(verl\.trainer\.[a-z_]+)")
_OVERRIDE = re.compile(r"^\+{0,2}([a-z_][a-z0-9_]*(?:\.[a-z0-9_]+)+)=(\S+)$")


def _raw(node):
    """A leaf as written in the YAML: interpolations as their `${...}` string, containers as plain lists/dicts."""
    if isinstance(node, DictConfig | ListConfig):
        return OmegaConf.to_container(node, resolve=False)
    return node._value()


def _leaf(cfg, key: str):
    node = cfg
    for part in key.split("."):
        if not isinstance(node, DictConfig) or part not in node:
            raise KeyError(key)
        node = node._get_node(part)
    return _raw(node)


def _load(config_name: str):
    generated = os.path.join(CONFIG_DIR, f"_generated_{config_name}")  # the composed tree of a defaults list
    return OmegaConf.load(generated if os.path.exists(generated) else os.path.join(CONFIG_DIR, config_name))


def _verl_config(config_name: str):
    """verl's config as a tree built from the transcribed defaults (for resolving interpolations)."""
    cfg = OmegaConf.create()
    for key, value in VERL_DEFAULTS[config_name].items():
        OmegaConf.update(cfg, key, value, merge=False, force_add=True)
    return cfg


@pytest.mark.parametrize("config_name", sorted(VERL_DEFAULTS))
def test_shipped_yaml_has_verl_defaults(config_name):
    ours = _load(config_name)
    differences = {}
    for key, verl_value in VERL_DEFAULTS[config_name].items():
        try:
            value = _leaf(ours, key)
        except KeyError:
            differences[key] = ("<missing>", verl_value)
            continue
        if value != verl_value:
            differences[key] = (value, verl_value)
    # a default that moved to today's verl's is listed, with its v0.4.1 value (verl/trainer/config/migration.py)
    moved = {c.key: c.v041 for c in CHANGED_DEFAULTS} if config_name in MOVED_IN else {}
    listed = {k: v for k, v in moved.items() if k in VERL_DEFAULTS[config_name]}
    assert {k: VERL_DEFAULTS[config_name][k] for k in listed} == listed, "a v0.4.1 value in the table is wrong"
    unlisted = {k: d for k, d in differences.items() if k not in listed}
    stale = sorted(k for k in listed if k not in differences)
    assert not unlisted and not stale, (
        f"{config_name}: key: (ours, verl v0.4.1) = {unlisted}; listed as moved but equal to v0.4.1: {stale}"
    )


def _overrides_in(words) -> list[str]:
    return [w.strip("'\"") for w in words if _OVERRIDE.match(w.strip("'\""))]


def _script_commands(path: str):
    """(entry module, [override strings]) for each `python -m verl.trainer.X` command in a shell script; a command
    that expands a bash array (`"${args[@]}"`) gets the overrides written outside any command line."""
    with open(path) as f:
        text = "\n".join(line for line in f.read().splitlines() if not line.lstrip().startswith("#"))
    lines = text.replace("\\\n", " ").splitlines()
    loose = _overrides_in(" ".join(line for line in lines if not _ENTRY.search(line)).split())
    commands = []
    for line in lines:
        match = _ENTRY.search(line)
        if not match or match.group(1) not in ENTRY_CONFIGS:
            continue
        words = line[match.end() :].replace('"$@"', "").split()
        commands.append((match.group(1), (loose if "[@]" in line else []) + _overrides_in(words)))
    return commands


def _example_scripts():
    found = []
    for folder, _, files in os.walk(os.path.join(ROOT, "examples")):
        for name in files:
            if name.endswith((".sh", ".slurm")):
                path = os.path.join(folder, name)
                found += [(os.path.relpath(path, ROOT), entry, o) for entry, o in _script_commands(path)]
    return sorted(found)


SCRIPTS = _example_scripts()


def test_every_example_script_is_covered():
    scripts = {s for s, _, _ in SCRIPTS}
    assert len(scripts) >= 12, scripts
    assert {entry for _, entry, _ in SCRIPTS} == set(ENTRY_CONFIGS)


def _value(text: str):
    """A command-line value as Hydra reads it (PyYAML alone reads 1e-6 as a string); shell variables stay text."""
    value = yaml.safe_load(text.replace('"', "").replace("$", "_"))
    if isinstance(value, str):
        try:
            return float(value)
        except ValueError:
            return value
    return value


def _apply(cfg, overrides: list[str]):
    for override in overrides:
        key, value = _OVERRIDE.match(override).groups()
        OmegaConf.update(cfg, key, _value(value), merge=False, force_add=True)
    return cfg


def _plain_value(value):
    return OmegaConf.to_container(value, resolve=True) if isinstance(value, DictConfig | ListConfig) else value


@pytest.mark.parametrize("script, entry, overrides", SCRIPTS, ids=[f"{s}:{e.rsplit('.', 1)[1]}" for s, e, _ in SCRIPTS])
def test_example_script_composes_as_in_verl(script, entry, overrides):
    config_name = ENTRY_CONFIGS[entry]
    ours = _apply(_load(config_name), overrides)
    verl = _apply(_verl_config(config_name), overrides)
    differences = {}
    moved = {c.key for c in CHANGED_DEFAULTS} if config_name in MOVED_IN else set()
    for key in VERL_DEFAULTS[config_name]:
        mine, theirs = (_plain_value(OmegaConf.select(cfg, key)) for cfg in (ours, verl))
        if mine != theirs and key not in moved:  # a moved default: listed in docs/migration.md, with its effect
            differences[key] = (mine, theirs)
    assert not differences, f"{script}: key: (ours, verl) = {differences}"
    if entry == "verl.trainer.main_ppo":  # a script naming its data and model never meets the built-in demo
        assert apply_builtin_demo(_apply(_load(config_name), overrides), command_line_keys(overrides)) == {}


# ------------------------------------------------------------------------------------------------ the built-in demo
def _composed(overrides=()):
    return _apply(_load("ppo_trainer.yaml"), list(overrides))


def test_demo_applies_to_a_run_without_data_or_model():
    cfg = _composed()
    chosen = apply_builtin_demo(cfg, set())
    assert chosen == DEMO_VALUES
    assert cfg.actor_rollout_ref.rollout.name == "hf" and cfg.actor_rollout_ref.rollout.n == 8
    assert cfg.data.train_files == "builtin://arithmetic/train.parquet"
    # every value the demo sets differs from verl's default: it exists because verl's default cannot run the demo
    for key, value in DEMO_VALUES.items():
        assert VERL_DEFAULTS["ppo_trainer.yaml"][key] != value, key


def test_demo_leaves_command_line_values_alone():
    overrides = ["actor_rollout_ref.rollout.n=4", "trainer.total_training_steps=3", "+trainer.logger=['console']"]
    cfg = _composed(overrides)
    chosen = apply_builtin_demo(cfg, command_line_keys(overrides))
    assert "actor_rollout_ref.rollout.n" not in chosen and cfg.actor_rollout_ref.rollout.n == 4
    assert "trainer.total_training_steps" not in chosen and cfg.trainer.total_training_steps == 3
    assert "trainer.logger" not in chosen
    assert chosen["algorithm.adv_estimator"] == "grpo"


def test_demo_stays_off_for_own_data_or_model():
    for overrides in (["data.train_files=/d/train.parquet"], ["actor_rollout_ref.model.path=/m"], ["~data.val_files"]):
        cfg = _composed()
        assert apply_builtin_demo(cfg, command_line_keys(overrides)) == {}
        assert OmegaConf.is_missing(cfg.actor_rollout_ref.rollout, "name")  # verl 0.9's required key, untouched
    # a --config-name file that names its own data (not on the command line) counts the same
    cfg = _composed(["data.train_files=/d/train.parquet"])
    assert apply_builtin_demo(cfg, set()) == {}


def test_demo_keeps_values_a_config_file_changed():
    cfg = _composed(["actor_rollout_ref.actor.optim.lr=3e-6"])  # e.g. set in a --config-name file
    chosen = apply_builtin_demo(cfg, set())
    assert "actor_rollout_ref.actor.optim.lr" not in chosen and cfg.actor_rollout_ref.actor.optim.lr == 3e-6


def test_demo_stays_off_where_verls_default_data_and_model_exist(tmp_path):
    data, model = tmp_path / "train.parquet", tmp_path / "model"
    data.write_bytes(b"")
    model.mkdir()
    defaults = _composed([f"data.train_files={data}", f"actor_rollout_ref.model.path={model}"])
    cfg = _apply(defaults.copy(), [])
    assert apply_builtin_demo(cfg, set(), defaults=defaults) == {}


def test_command_line_keys():
    assert command_line_keys(["a.b=1", "+c.d=x=y", "++e=2", "~f.g", "h.i="]) == {"a.b", "c.d", "e", "f.g", "h.i"}
