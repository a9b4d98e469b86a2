"""The example run scripts use only config keys that exist (a typo would fail only at launch on a GPU box)."""

import os
import re

import pytest
import yaml
from omegaconf import OmegaConf

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
CONFIG_DIR = os.path.join(ROOT, "verl", "trainer", "config")
_OVERRIDE = re.compile(r"([a-z_][a-z0-9_]*\.[a-z0-9_.]+)=(\S+)")

RL_SCRIPTS = {
    "examples/ppo_trainer/run_qwen2.5-0.5b.sh": "gae",
    "examples/grpo_trainer/run_qwen2.5-0.5b.sh": "grpo",
    "examples/rloo_trainer/run_qwen2.5-0.5b.sh": "rloo",
    "examples/reinforce_plus_plus_trainer/run_qwen2.5-0.5b.sh": "reinforce_plus_plus",
    "examples/remax_trainer/run_qwen2.5-0.5b.sh": "remax",
}


def _override_args(script: str) -> list[str]:
    """The script's ``key=value`` arguments as written (keys with a dot: shell variables such as ``save_path=$2``
    have none), with ``$HOME`` as ``/home/u``."""
    found = []
    with open(os.path.join(ROOT, script)) as f:
        for line in f:
            text = line.strip()
            if text.startswith("#"):
                continue
            text = text.replace('"$@"', "").rstrip("\\").strip()
            match = _OVERRIDE.fullmatch(text)
            if match:
                value = match.group(2).replace('"', "").replace("$HOME", "/home/u")
                found.append(f"{match.group(1)}={value}")
    return found


def _overrides(script: str) -> dict:
    """:func:`_override_args` as a dict of parsed values."""
    return {arg.split("=", 1)[0]: yaml.safe_load(arg.split("=", 1)[1]) for arg in _override_args(script)}


def _flat(config_name: str) -> str:
    """The file holding the whole composed tree: the generated flat file where a config has a defaults list."""
    generated = f"_generated_{config_name}"
    return generated if os.path.exists(os.path.join(CONFIG_DIR, generated)) else config_name


def _apply(config_name: str, overrides: dict):
    cfg = OmegaConf.load(os.path.join(CONFIG_DIR, _flat(config_name)))
    OmegaConf.set_struct(cfg, True)
    for key, value in overrides.items():
        OmegaConf.update(cfg, key, value, merge=False)  # struct mode: an unknown key raises
    return cfg


@pytest.mark.parametrize("script, estimator", sorted(RL_SCRIPTS.items()))
def test_rl_scripts_use_known_ppo_trainer_keys(script, estimator):
    overrides = _overrides(script)
    assert len(overrides) > 20, overrides
    cfg = _apply("ppo_trainer.yaml", overrides)
    assert cfg.algorithm.adv_estimator == estimator
    assert cfg.actor_rollout_ref.model.path == "Qwen/Qwen2.5-0.5B-Instruct"
    assert cfg.data.train_files == "/home/u/data/gsm8k/train.parquet"
    # critic-free estimators sample several responses per prompt; GAE trains a critic on the same model
    if estimator == "gae":
        assert cfg.critic.model.path == "Qwen/Qwen2.5-0.5B-Instruct"
    else:
        assert cfg.actor_rollout_ref.rollout.n > 1


def test_megatron_script_passes_main_ppos_config_check():
    """The Megatron example composes on verl's ppo_megatron_trainer config and main_ppo's check accepts it as
    written (tensor parallel 2 over its 2 workers; sequence parallelism and the distributed optimizer as the YAML)."""
    pytest.importorskip("megatron.core", reason="megatron-core is not installed (pip install -e .[megatron])")
    from tests.trainer.ppo_e2e_utils import compose_config
    from verl.trainer.main_ppo import prepare_config

    script = "examples/grpo_trainer/run_tiny_cpu_megatron_tp2.sh"
    with open(os.path.join(ROOT, script)) as f:
        assert "main_ppo --config-name ppo_megatron_trainer" in f.read()
    config = compose_config(_override_args(script), "ppo_megatron_trainer")
    prepare_config(config)
    actor = config.actor_rollout_ref.actor
    assert actor.strategy == "megatron" and actor.megatron.tensor_model_parallel_size == 2
    assert actor.megatron.sequence_parallel and actor.megatron.use_distributed_optimizer
    assert config.actor_rollout_ref.ref.megatron.tensor_model_parallel_size == 2  # the reference follows the actor


def test_reward_model_script_passes_the_config_check():
    """verl v0.4's reward-model command line (packed forwards for actor, critic and reward model) composes on
    ppo_trainer and the check accepts it as written (model folders and data files are not looked up here)."""
    from tests.trainer.ppo_e2e_utils import compose_config
    from verl.trainer.config.checks.ppo import check_ppo_config

    script = "examples/ppo_trainer/run_qwen2.5-0.5b_rm.sh"
    config = compose_config(_override_args(script))
    check_ppo_config(config, check_paths=False, check_device=False)
    rm = config.reward_model
    assert rm.enable and rm.model.use_remove_padding and rm.model.path == "sfairXC/FsfairX-LLaMA3-RM-v0.1"
    assert config.critic.model.use_remove_padding and config.actor_rollout_ref.model.use_remove_padding
    assert config.data.return_raw_chat  # the reward model's own chat template needs the raw chat


def test_sft_script_uses_known_sft_trainer_keys():
    overrides = _overrides("examples/sft/gsm8k/run_qwen_05_sft.sh")
    cfg = _apply("sft_trainer.yaml", overrides)
    assert cfg.data.prompt_key == "extra_info" and list(cfg.data.prompt_dict_keys) == ["question"]
    assert list(cfg.data.response_dict_keys) == ["answer"]
    assert cfg.model.partial_pretrain == "Qwen/Qwen2.5-0.5B-Instruct"


def test_unknown_key_would_be_caught():
    with pytest.raises(Exception, match="typo_key"):
        _apply("sft_trainer.yaml", {"data.typo_key": 1})


def test_slurm_script_uses_known_ppo_trainer_keys():
    overrides = _overrides("examples/slurm/ray_on_slurm.slurm")
    assert len(overrides) > 20, overrides
    assert overrides["trainer.nnodes"] == "${#nodes[@]}"  # one Ray node per Slurm node
    cfg = _apply("ppo_trainer.yaml", overrides)
    assert cfg.algorithm.adv_estimator == "grpo" and cfg.actor_rollout_ref.rollout.name == "vllm"


@pytest.mark.parametrize("size", ["cpu-135m", "0.5b", "1.5b", "3b", "7b", "14b", "32b"])
def test_tuning_script_settings_are_valid_config(size):
    """Every size's overrides name real keys with values of the right type (the typed config checks both)."""
    import subprocess

    from tests.trainer.ppo_e2e_utils import compose_config
    from verl.trainer.config import PPOConfig

    script = os.path.join(ROOT, "examples", "tuning", "run_grpo_by_size.sh")
    out = subprocess.run(
        ["bash", script, size], env=dict(os.environ, DRY_RUN="1"), capture_output=True, text=True, check=True
    )
    overrides = out.stdout.split()
    typed = PPOConfig.from_config(compose_config(overrides))
    assert typed.algorithm.adv_estimator == "grpo" and typed.actor_rollout_ref.actor.use_dynamic_bsz
    assert typed.trainer.experiment_name == f"grpo_{size}"


@pytest.mark.parametrize(
    "script",
    [
        "examples/multiturn/run_qwen2.5-0.5b_gsm8k_multiturn.sh",
        "examples/multiturn/run_tiny_cpu_gsm8k_multiturn.sh",
        "examples/multiturn/run_tiny_cpu_gsm8k_multiturn_async.sh",
    ],
)
def test_multiturn_scripts_use_known_keys_and_shipped_configs(script):
    overrides = _overrides(script)
    cfg = _apply("ppo_trainer.yaml", overrides)
    multi_turn = cfg.actor_rollout_ref.rollout.multi_turn
    assert multi_turn.enable is True and cfg.data.return_raw_chat is True
    for key in ("tool_config_path", "interaction_config_path"):
        path = multi_turn.get(key)
        if path:  # $CONFIG_DIR is the script's own config folder
            assert os.path.isfile(path.replace("$CONFIG_DIR", os.path.join(ROOT, "examples", "multiturn", "config")))
