"""The config folders compose as verl 0.9 lays them out, and `_generated_<name>.yaml` is exactly what they compose."""

import glob
import os

import pytest
from hydra import compose, initialize_config_dir
from omegaconf import OmegaConf

from verl.trainer.config import generated

CONFIG_DIR = generated.CONFIG_DIR


def _composed(name: str, overrides=()):
    with initialize_config_dir(config_dir=CONFIG_DIR, version_base=None):
        return compose(config_name=name, overrides=list(overrides))


@pytest.mark.parametrize("name", generated.GENERATED)
def test_generated_file_is_what_hydra_composes(name):
    path = generated.generated_path(name)
    with open(path) as f:
        assert f.read() == generated.render(name), f"{path} is stale: run python -m verl.trainer.config.generated"
    on_disk = OmegaConf.to_container(OmegaConf.load(path), resolve=False)
    assert on_disk == OmegaConf.to_container(_composed(name), resolve=False)


def test_engine_family_picks_each_roles_file():
    """`model_engine` chooses actor/ref/critic files as in verl: dp gives FSDP's, megatron adds the megatron block."""
    dp, megatron = _composed("ppo_trainer"), _composed("ppo_megatron_trainer")
    assert dp.model_engine == "dp" and megatron.model_engine == "megatron"
    assert dp.actor_rollout_ref.actor._target_ == "verl.workers.config.FSDPActorConfig"
    assert megatron.actor_rollout_ref.actor._target_ == "verl.workers.config.McoreActorConfig"
    assert "megatron" not in dp.actor_rollout_ref.actor and megatron.actor_rollout_ref.actor.strategy == "megatron"
    # one engine file, several mounts: the ref keeps its own values where its file overrides the shared one
    assert megatron.actor_rollout_ref.ref.megatron.use_distributed_optimizer is False
    assert megatron.reward_model.megatron.use_distributed_optimizer is False
    assert megatron.critic.megatron.use_distributed_optimizer is True
    assert dp.critic.optim.lr == 1e-5 and dp.actor_rollout_ref.actor.optim.lr == 1e-6
    # a command line picks the family the same way
    switched = _composed("ppo_trainer", ["model_engine=megatron"])
    assert switched.actor_rollout_ref.actor.megatron.tensor_model_parallel_size == 1


def _config_files():
    """The PPO configs' files (sft_trainer, generation and evaluation keep verl v0.4's own layout)."""
    standalone = {"sft_trainer.yaml", "generation.yaml", "evaluation.yaml"}
    paths = glob.glob(os.path.join(CONFIG_DIR, "**", "*.yaml"), recursive=True)
    return sorted(p for p in paths if os.path.relpath(p, CONFIG_DIR) not in standalone)


@pytest.mark.parametrize("path", _config_files(), ids=lambda p: os.path.relpath(p, CONFIG_DIR))
def test_comment_style(path):
    """Every key has a comment line above it, no inline comments, and a blank line after a leaf key: the style
    verl's CI enforces, which the reference pages read (the `defaults` list and list items are not keys)."""
    with open(path) as f:
        lines = f.read().splitlines()
    indent = lambda s: len(s) - len(s.lstrip())  # noqa: E731
    for i, line in enumerate(lines):
        stripped = line.strip()
        if not stripped or stripped.startswith("#") or stripped.startswith("- ") or line == "defaults:":
            continue
        assert ":" in stripped, f"line {i + 1}: not a key line: {line!r}"
        value = stripped.split(":", 1)[1]
        assert " #" not in value, f"line {i + 1}: inline comment: {line!r}"
        assert lines[i - 1].strip().startswith("#"), f"line {i + 1}: key without a comment above: {line!r}"
        following = lines[i + 1] if i + 1 < len(lines) else ""
        if value.strip() != "":
            assert following.strip() == "" or indent(following) > indent(line), (
                f"line {i + 1}: leaf key must be followed by a blank line: {line!r}"
            )


def _targets(node, path=""):
    """(dotted path, node) of every node of a composed config that names its class with `_target_`."""
    if OmegaConf.is_dict(node):
        if "_target_" in node:
            yield path, node
        for key in node:
            yield from _targets(node[key], f"{path}.{key}" if path else str(key))


@pytest.mark.parametrize("name", generated.GENERATED)
def test_every_target_builds_its_node_and_round_trips(name):
    """`omega_conf_to_dataclass(node)` builds the class a node's `_target_` names, and the instance gives back every
    key of the node with its value (the resolved YAML): the typed config and the YAML say the same. The instance may
    hold more: fields the node leaves to the class (verl builds the ref's node as an actor config)."""
    from hydra.utils import get_class

    from verl.utils.config import omega_conf_to_dataclass

    composed = _composed(name, ["actor_rollout_ref.rollout.name=hf"])  # verl 0.9 leaves it to the command line
    found = list(_targets(composed))
    assert len(found) >= 10
    for path, node in found:
        typed = omega_conf_to_dataclass(node)
        assert isinstance(typed, get_class(node._target_)), path
        expected = OmegaConf.to_container(node, resolve=True)
        assert _missing_or_different(expected, typed.to_dict()) == [], path


def _missing_or_different(expected: dict, built: dict, prefix: str = "") -> list[str]:
    """Keys of ``expected`` (a YAML node) that ``built`` (a typed section's dict) lacks or holds another value of."""
    problems = []
    for key, value in expected.items():
        if key == "_target_":
            continue
        if key not in built:
            problems.append(f"{prefix}{key}: missing")
        elif isinstance(value, dict) and isinstance(built[key], dict):
            # an empty mapping leaves every key of a typed section to the class (a teacher's `engine_kwargs: {}`)
            problems += _missing_or_different(value, built[key], f"{prefix}{key}.")
        elif built[key] != value:
            problems.append(f"{prefix}{key}: {built[key]!r} != YAML {value!r}")
    return problems


# every config name an entry point composes (verl 0.9's names; sft_trainer, generation and evaluation keep v0.4's)
CONFIG_NAMES = ("ppo_trainer", "ppo_megatron_trainer", "sft_trainer", "generation", "evaluation")


@pytest.mark.parametrize("name", CONFIG_NAMES)
def test_every_config_name_composes(name):
    composed = OmegaConf.to_container(_composed(name), resolve=False)
    assert len(composed) >= 3 and "defaults" not in composed
