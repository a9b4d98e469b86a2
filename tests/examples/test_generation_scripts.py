"""The generation run scripts (examples/generation, recipe/r1) pass only keys that exist in generation.yaml and
evaluation.yaml, with the values they mean; a typo would otherwise fail only at launch on a GPU box."""

import os
import re

import pytest
import yaml
from omegaconf import OmegaConf

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
CONFIG_DIR = os.path.join(ROOT, "verl", "trainer", "config")
_OVERRIDE = re.compile(r"([a-z_][a-z0-9_]*\.[a-z0-9_.]+)=(\S+)")
_COMMANDS = {"main_generation": "generation.yaml", "main_eval": "evaluation.yaml"}


def commands(script: str) -> dict[str, dict]:
    """``{entry point: {key: value}}`` for each ``python3 -m verl.trainer.<entry>`` call of ``script``."""
    found: dict[str, dict] = {}
    current = None
    with open(os.path.join(ROOT, script)) as f:
        for line in f:
            text = line.strip()
            if text.startswith("#"):
                continue
            for entry in _COMMANDS:
                if f"verl.trainer.{entry}" in text:
                    current = found.setdefault(entry, {})
                    text = text.split(f"verl.trainer.{entry}", 1)[1]
            for key, value in _OVERRIDE.findall(text.replace('"$@"', "")):
                value = value.rstrip("\\").replace('"', "").replace("$HOME", "/home/u")
                current[key] = yaml.safe_load(value)
    return found


def apply(entry: str, overrides: dict):
    cfg = OmegaConf.load(os.path.join(CONFIG_DIR, _COMMANDS[entry]))
    OmegaConf.set_struct(cfg, True)
    for key, value in overrides.items():
        OmegaConf.update(cfg, key, value, merge=False)  # struct mode: an unknown key raises
    return cfg


@pytest.mark.parametrize(
    "script",
    [
        "recipe/r1/run_r1_eval.sh",
        "examples/generation/run_qwen2.5-0.5b_gsm8k.sh",
        "examples/generation/run_arithmetic_cpu.sh",
    ],
)
def test_generation_scripts_use_known_keys(script):
    calls = commands(script)
    assert set(calls) == {"main_generation", "main_eval"}
    gen = apply("main_generation", calls["main_generation"])
    ev = apply("main_eval", calls["main_eval"])
    assert gen.data.n_samples > 1 and gen.rollout.temperature > 0 and gen.rollout.n == 1
    # main_eval reads what main_generation wrote
    assert ev.data.path == gen.data.output_path
    if script.startswith("recipe/r1"):
        assert ev.custom_reward_function.path.endswith("/reward_score.py")
        assert gen.rollout.temperature == 0.6 and gen.rollout.top_p == 0.95 and gen.data.n_samples == 8
    if script.endswith("_cpu.sh"):
        assert gen.trainer.device == "cpu" and gen.rollout.name == "hf"
        assert gen.model.path == "builtin://default_model"


def test_an_unknown_key_would_be_caught():
    with pytest.raises(Exception, match="typo_key"):
        apply("main_generation", {"rollout.typo_key": 1})
