"""docs/migration.md and verl/trainer/config/migration.py tell the truth: the defaults that moved since verl v0.4.1
are today's verl's, each is on the page, and main_ppo's start-up line names the ones that change a run."""

import os

import pytest
import yaml
from omegaconf import OmegaConf

from tests.trainer.config.yaml_mirror import compose_config
from verl.trainer.config.migration import CHANGED_DEFAULTS, KEPT_DEFAULTS, changed_defaults_line

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))
HERE = os.path.dirname(os.path.abspath(__file__))
with open(os.path.join(HERE, "verl_v041_defaults.yaml")) as f:
    V041 = yaml.safe_load(f)["ppo_trainer.yaml"]
with open(os.path.join(HERE, "verl_v091_defaults.yaml")) as f:
    V091 = yaml.safe_load(f)["ppo_trainer.yaml"]
with open(os.path.join(ROOT, "docs", "migration.md")) as f:
    PAGE = f.read()


def _ours(key):
    cfg = compose_config("ppo_trainer")
    node = OmegaConf.select(cfg, key, throw_on_missing=False) if key != "actor_rollout_ref.rollout.name" else "???"
    return OmegaConf.to_container(node) if OmegaConf.is_config(node) else node


@pytest.mark.parametrize("change", CHANGED_DEFAULTS, ids=lambda c: c.key)
def test_moved_default_is_today_s_and_on_the_page(change):
    # keys v0.4.1 read only in code (rollout.seed, data.seed) are not in its YAML: their code default is the table's
    assert V041.get(change.key, change.v041) == change.v041, "the v0.4.1 value in the table is not v0.4.1's"
    assert _ours(change.key) != change.v041
    theirs = V091.get(change.key, _ours(change.key))  # a key verl 0.9 dropped keeps ours
    if not (isinstance(theirs, str) and theirs.startswith("${")):  # an interpolation: compared where it points
        assert _ours(change.key) == theirs
    assert f"`{change.key}`" in PAGE or f"`*.{change.key.rsplit('.', 2)[-2]}.{change.key.rsplit('.', 1)[1]}`" in PAGE


@pytest.mark.parametrize("kept", KEPT_DEFAULTS, ids=lambda k: k.key)
def test_kept_default_differs_from_verl_09_and_is_on_the_page(kept):
    assert V091[kept.key] == kept.verl and _ours(kept.key) != kept.verl
    assert f"`{kept.key}`" in PAGE


def test_start_up_line_names_the_moved_defaults_that_change_the_run():
    cfg = compose_config("ppo_trainer", ["actor_rollout_ref.rollout.name=hf"])
    line = changed_defaults_line(cfg, {"actor_rollout_ref.rollout.name"})
    assert "actor_rollout_ref.rollout.seed=42 (v0.4.1: 0;" in line and "data.seed=None (v0.4.1: 1;" in line
    assert "use_remove_padding" not in line  # same values: not a change to what is trained
    # a key the command line sets is the user's choice, not a moved default
    line = changed_defaults_line(cfg, {"actor_rollout_ref.rollout.seed", "data.seed"})
    assert line is None


def _same_link(key: str, ours, theirs) -> bool:
    """verl 0.9 writes a link as ``${oc.select:key,default}`` or relative (``${.save_contents}``) where v0.4.1 (and
    this YAML) write ``${absolute.key}``: the same link."""
    if not (isinstance(ours, str) and isinstance(theirs, str) and theirs.startswith("${")):
        return False
    target = theirs[2:-1]
    if target.startswith("oc.select:"):
        target = target[len("oc.select:") :].split(",", 1)[0]
    if target.startswith("."):  # relative to the key's own node
        target = key.rpartition(".")[0] + target
    return ours == "${" + target + "}"


def test_every_verl_09_key_is_here_with_its_default():
    """Each key of verl 0.9.1's composed ppo_trainer config is in ours, with verl 0.9's default, or the difference is
    a kept default (with its reason) or a row of the page's table of defaults that still differ."""
    cfg = OmegaConf.load(os.path.join(ROOT, "verl", "trainer", "config", "_generated_ppo_trainer.yaml"))
    kept = {k.key for k in KEPT_DEFAULTS}
    missing, different = [], {}
    for key, theirs in V091.items():
        parent, _, leaf = key.rpartition(".")
        node = OmegaConf.select(cfg, parent) if parent else cfg
        if node is None or leaf not in node.keys():  # a `???` value is not `in` its node
            missing.append(key)
            continue
        child = node._get_node(leaf)
        ours = OmegaConf.to_container(child, resolve=False) if OmegaConf.is_config(child) else child._value()
        if ours != theirs and key not in kept and not _same_link(key, ours, theirs):
            different[key] = (ours, theirs)
    assert missing == [], f"{len(missing)} verl 0.9 keys missing: {missing[:40]}"
    # every other difference is a row of the page's table of defaults that still differ, with its reason
    section = PAGE.split("## Defaults that still differ from verl 0.9", 1)[1].split("\n## ", 1)[0]
    unlisted = {k: v for k, v in different.items() if f"`{k}`" not in section}
    assert unlisted == {}, f"(ours, verl 0.9) not in docs/migration.md: {unlisted}"
