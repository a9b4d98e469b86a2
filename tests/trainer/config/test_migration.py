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
