"""The recipes' run scripts: their verl-style overrides compose with the recipe's config and pass its checks.

Each script runs with a ``python3`` on PATH that records its arguments instead of training.
"""

import json
import os
import subprocess
import sys

import pytest

import recipe
from recipe.dapo.main_dapo import check_dapo_config
from recipe.entropy.main_entropy import check_entropy_config
from tests.recipe.dapo_utils import compose_recipe_config
from verl.trainer.config import PPOConfig
from verl.trainer.config.checks.ppo import check_ppo_config

RECORDER = f"""#!{sys.executable}
import json, os, sys
with open(os.environ["ARGS_FILE"], "w") as f:
    json.dump(sys.argv[1:], f)
"""


def script_arguments(script: str, tmp_path) -> list[str]:
    """The arguments the script passes to ``python3``."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    (bin_dir / "python3").write_text(RECORDER)
    (bin_dir / "python3").chmod(0o755)
    args_file = tmp_path / "args.json"
    env = dict(os.environ, PATH=f"{bin_dir}:{os.environ['PATH']}", ARGS_FILE=str(args_file))
    path = os.path.join(os.path.dirname(recipe.__file__), script)
    subprocess.run(["bash", path], env=env, check=True, capture_output=True, timeout=60)
    return json.loads(args_file.read_text())


@pytest.mark.parametrize(
    ("script", "module", "config_name"),
    [
        ("dapo/run_dapo_qwen2.5_0.5b.sh", "recipe.dapo.main_dapo", "dapo_trainer"),
        ("dapo/run_dapo_cpu.sh", "recipe.dapo.main_dapo", "dapo_trainer"),
        ("entropy/run_clip_cov_qwen2.5_0.5b.sh", "recipe.entropy.main_entropy", "entropy_trainer"),
    ],
)
def test_script_overrides_compose_and_pass_the_checks(script, module, config_name, tmp_path):
    args = script_arguments(script, tmp_path)
    assert args[:2] == ["-m", module]
    name = module.split(".")[1]
    config = compose_recipe_config(name, config_name, args[2:])
    check_dapo_config(config)
    if name == "entropy":
        check_entropy_config(config)
    check_ppo_config(config, check_paths=False, check_device=False)
    cfg = PPOConfig.from_config(config)
    assert cfg.algorithm.filter_groups.enable and cfg.algorithm.filter_groups.metric in ("acc", "seq_reward")
    assert cfg.data.gen_batch_size > cfg.data.train_batch_size
