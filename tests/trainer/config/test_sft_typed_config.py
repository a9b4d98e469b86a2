"""The typed SFT config mirrors sft_trainer.yaml: every YAML key is a field with the YAML's default, every field the
YAML lacks is a documented hidden key, and bad keys or values fail with their names."""

from __future__ import annotations

import pytest
from hydra.errors import ConfigCompositionException
from omegaconf import OmegaConf

from tests.trainer.config.yaml_mirror import assert_no_extra_keys, compose_config, yaml_mirror_problems
from verl.trainer.config import ConfigError
from verl.trainer.config.sft import SFTConfig, SFTDataConfig, SFTModelConfig
from verl.utils.config import omega_conf_to_dataclass


def _compose(overrides=()):
    return compose_config("sft_trainer", overrides)


def test_every_dataclass_default_equals_the_yaml():
    problems = yaml_mirror_problems(SFTConfig, "sft_trainer")
    assert not problems, "\n".join(problems)


def test_default_yaml_builds_with_no_extra_keys():
    cfg = SFTConfig.from_config(_compose())
    assert_no_extra_keys(cfg)
    assert cfg.optim.betas == [0.9, 0.95] and cfg.optim.lr == pytest.approx(1e-5)
    assert cfg.trainer.default_local_dir == "checkpoints/gsm8k-sft/test"  # interpolations are resolved
    assert cfg.model.fsdp_config.wrap_policy.min_num_params == 0 and not cfg.model.is_lora


def test_an_unknown_key_is_an_error_that_names_it():
    with pytest.raises(ConfigCompositionException, match=r"optim\.clip_gradd"):
        _compose(["optim.clip_gradd=2.0"])
    bad = OmegaConf.create({"model": {"fsdp_config": {"cpu_offlaod": True}}})
    with pytest.raises(TypeError, match=r"model\.fsdp_config\.cpu_offlaod"):
        omega_conf_to_dataclass(bad, SFTConfig)


def test_plus_overrides_keep_working_as_extra_keys():
    cfg = SFTConfig.from_config(_compose(["+model.my_recipe_flag=True", "+data.my_filter.min_len=3"]))
    assert cfg.model.my_recipe_flag is True and cfg.model.get("my_recipe_flag") is True
    assert cfg.data.my_filter.min_len == 3  # a nested extra section reads as it did on the DictConfig
    assert cfg.to_dict()["data"]["my_filter"] == {"min_len": 3}


def test_a_value_of_the_wrong_type_names_the_key():
    with pytest.raises(TypeError, match=r"data\.train_batch_size='many'"):
        SFTConfig.from_config(_compose(["data.train_batch_size=many"]))
    with pytest.raises(TypeError, match=r"use_remove_padding=3"):
        SFTConfig.from_config(_compose(["use_remove_padding=3"]))
    with pytest.raises(TypeError, match=r"optim\.betas\[1\]='x'"):
        SFTConfig.from_config(_compose(["optim.betas=[0.9,x]"]))


@pytest.mark.parametrize(
    "override, pattern",
    [
        ("model.strategy=ddp", "model.strategy='ddp'"),
        ("model.lora_rank=-1", "model.lora_rank=-1"),
        ("model.gradient_checkpointing_policy=partial", "model.gradient_checkpointing_policy='partial'"),
        ("optim.lr_scheduler=linear", "optim.lr_scheduler='linear'"),
        ("data.truncation=middle", "data.truncation='middle'"),
        ("data.chat_template=x", "data.chat_template"),
        ("data.micro_batch_size_per_gpu=0", "data.micro_batch_size_per_gpu=0"),
        ("trainer.total_epochs=0", "trainer.total_epochs=0"),
        ("ulysses_sequence_parallel_size=0", "ulysses_sequence_parallel_size=0"),
        ("ulysses_sequence_parallel_size=2", "use_remove_padding=True"),
    ],
)
def test_a_bad_value_fails_when_the_config_is_built(override, pattern):
    with pytest.raises(ConfigError, match=pattern.replace(".", r"\.").replace("[", r"\[")):
        SFTConfig.from_config(_compose([override]))


def test_epochs_may_be_null_when_the_steps_are_given():
    cfg = SFTConfig.from_config(_compose(["trainer.total_epochs=null", "trainer.total_training_steps=5"]))
    assert cfg.trainer.total_epochs is None and cfg.trainer.total_training_steps == 5


def test_check_needs_the_world_size_and_the_files(tmp_path):
    train = tmp_path / "train.parquet"
    train.write_bytes(b"")
    files = [f"data.train_files={train}", "data.val_files=null"]
    cfg = SFTConfig.from_config(_compose([*files, "data.train_batch_size=8", "data.micro_batch_size_per_gpu=2"]))
    cfg.check(world_size=4)  # 8 / dp 4 = 2 per rank, one micro batch
    with pytest.raises(ConfigError, match=r"data\.train_batch_size=8 / dp=2 = 4 .*data\.micro_batch_size_per_gpu=3"):
        SFTConfig.from_config(_compose([*files, "data.train_batch_size=8", "data.micro_batch_size_per_gpu=3"])).check(2)
    with pytest.raises(ConfigError, match="positive divisor of the world size 3"):
        SFTConfig.from_config(_compose([*files, "ulysses_sequence_parallel_size=2", "use_remove_padding=True"])).check(
            3
        )
    with pytest.raises(FileNotFoundError, match=r"data\.val_files: '/no/val\.parquet'"):
        SFTConfig.from_config(_compose([f"data.train_files={train}", "data.val_files=/no/val.parquet"])).check(1)
    with pytest.raises(ConfigError, match=r"data\.train_files is empty"):
        SFTConfig.from_config(_compose(["data.train_files=[]", "data.val_files=null"])).check(1)


def test_sections_read_like_the_dictconfig_they_replace():
    data = SFTConfig.from_config(_compose()).data
    assert isinstance(data, SFTDataConfig)
    # the SFT datasets (and users' custom ones) read their section with get / [] / in
    assert data["prompt_key"] == data.get("prompt_key") == data.prompt_key == "question"
    assert "multiturn" in data and data.multiturn.get("messages_key") == "messages"
    assert data.get("not_a_key", 7) == 7
    assert OmegaConf.create(data.to_dict()).max_length == data.max_length


def test_sections_stand_alone_with_their_defaults():
    # create_sft_dataset builds the data section alone from whatever mapping it is given
    data = omega_conf_to_dataclass({"max_length": 48, "multiturn": {"enable": True}}, SFTDataConfig, path="data")
    assert data.max_length == 48 and data.multiturn.enable and data.multiturn.tools_key == "tools"
    with pytest.raises(TypeError, match=r"data\.max_length='long'"):
        omega_conf_to_dataclass({"max_length": "long"}, SFTDataConfig, path="data")
    assert SFTModelConfig(lora_rank=8).is_lora


def test_selective_checkpointing_needs_checkpointing_on():
    overrides = ["model.gradient_checkpointing_policy=selective", "model.enable_gradient_checkpointing=False"]
    with pytest.raises(ConfigError, match="gradient_checkpointing_policy=selective with model.enable_gradient_check"):
        SFTConfig.from_config(_compose(overrides))
    assert SFTConfig.from_config(_compose(overrides[:1])).model.gradient_checkpointing_policy == "selective"
