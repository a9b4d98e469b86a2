"""bench_recipes.py: every variant's overrides compose with its entry point's config, and the summary is right."""

import json
import os

import pytest
from hydra import compose, initialize_config_dir

from tests.benchmark_scripts import ROOT, load_benchmark

bench = load_benchmark("bench_recipes")


def _config_of(module: str) -> tuple[str, str]:
    """(config dir, config name) of an entry point: main_ppo's, or recipe/<name>/config/<name>_trainer.yaml."""
    if module == "verl.trainer.main_ppo":
        return os.path.join(ROOT, "verl", "trainer", "config"), "ppo_trainer"
    recipe = module.split(".")[1]
    return os.path.join(ROOT, "recipe", recipe, "config"), f"{recipe}_trainer"


@pytest.mark.parametrize("name", sorted(bench.VARIANTS))
def test_variant_overrides_compose(name, tmp_path):
    module, overrides = bench.VARIANTS[name]
    config_dir, config_name = _config_of(module)
    common = ["trainer.total_training_steps=4", "++data.seed=7", "++actor_rollout_ref.rollout.seed=7"]
    with initialize_config_dir(config_dir=config_dir, version_base=None):
        cfg = compose(config_name=config_name, overrides=[*overrides, *common])
    assert cfg.data.seed == 7 and cfg.actor_rollout_ref.rollout.seed == 7
    for override in overrides:
        key, value = override.split("=", 1)
        node = cfg
        for part in key.split("."):
            node = node[part]
        assert str(node) == value, override


def test_validations_read_metrics_jsonl(tmp_path):
    records = [
        {"step": 0, "kind": "validation", "metrics": {"val-core/verl/arithmetic/reward/mean@1": 0.1}},
        {"step": 1, "kind": "train", "metrics": {"critic/score/mean": 0.3}},
        {"step": 5, "kind": "validation", "metrics": {"val-core/verl/arithmetic/reward/mean@1": 0.92}},
        {"step": 5, "kind": "train", "metrics": {"critic/score/mean": 0.8}},
    ]
    (tmp_path / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in records))
    assert bench._validations(str(tmp_path)) == [(0, 0.1), (5, 0.92)]


def test_validations_accept_any_sample_count(tmp_path):
    # SPPO validates with val_kwargs.n=2, so its core metric is mean@2; other val-core keys are not the score.
    records = [
        {"step": 0, "kind": "validation", "metrics": {"val-core/verl/arithmetic/reward/mean@2": 0.2}},
        {
            "step": 5,
            "kind": "validation",
            "metrics": {"val-aux/verl/arithmetic/reward/std@2": 0.4, "val-core/verl/arithmetic/reward/mean@2": 0.7},
        },
    ]
    (tmp_path / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in records))
    assert bench._validations(str(tmp_path)) == [(0, 0.2), (5, 0.7)]


def test_summary_table_means_spread_and_steps_to_threshold():
    results = [
        {"variant": "grpo", "seed": 1, "wall_s": 10.0, "val_final": 0.9, "curve": [[0, 0.1], [5, 0.5], [10, 0.9]]},
        {"variant": "grpo", "seed": 2, "wall_s": 20.0, "val_final": 0.7, "curve": [[0, 0.1], [5, 0.7], [10, 0.7]]},
        {"variant": "dapo", "seed": 1, "wall_s": 5.0, "exit_code": 1},
    ]
    table = bench.summary_table(results, threshold=0.9, steps=10).splitlines()
    assert table[2] == "| grpo | 0.800 ± 0.141 | 10, >10 | 15 | 2/2 |"
    assert table[3] == "| dapo | failed | - | - | 0/1 |"
    assert bench.steps_to([[0, 0.95]], 0.9) == 0
