"""The data files are checked in the driver, before Ray starts: each local file is parquet, has rows, and has every
column the run reads; a column the run does not read is never an error."""

from __future__ import annotations

import logging

import pandas as pd
import pytest

from tests.trainer.ppo_e2e_utils import compose_config
from verl.trainer.config import ConfigError, PPOConfig
from verl.trainer.config.checks.data import check_data_files

PROMPT = [{"role": "user", "content": "1+1?"}]
GOOD_ROW = {"data_source": "openai/gsm8k", "prompt": PROMPT, "reward_model": {"style": "rule", "ground_truth": "2"}}


def _write(path, rows) -> str:
    pd.DataFrame(rows).to_parquet(path)
    return str(path)


def _config(train: str, val: str | None = None, *overrides: str) -> PPOConfig:
    config = compose_config([f"data.train_files={train}", f"data.val_files={val or train}", *overrides])
    return PPOConfig.from_config(config)


def test_verl_rows_pass(tmp_path):
    check_data_files(_config(_write(tmp_path / "ok.parquet", [GOOD_ROW])))


def test_a_file_that_is_not_parquet_names_the_file(tmp_path):
    bad = tmp_path / "train.parquet"
    bad.write_text("question,answer\n1+1,2\n")
    with pytest.raises(ConfigError, match=r"data.train_files: '.*train.parquet' is not a parquet file"):
        check_data_files(_config(str(bad)))


def test_an_empty_file_is_refused(tmp_path):
    good = _write(tmp_path / "ok.parquet", [GOOD_ROW])
    empty = pd.DataFrame([GOOD_ROW]).iloc[:0]
    empty.to_parquet(tmp_path / "empty.parquet")
    with pytest.raises(ConfigError, match=r"data.val_files: '.*empty.parquet' has no rows"):
        check_data_files(_config(good, str(tmp_path / "empty.parquet")))


def test_a_missing_prompt_column_names_data_prompt_key(tmp_path):
    path = _write(tmp_path / "q.parquet", [{**GOOD_ROW, "question": PROMPT}])
    check_data_files(_config(path, None, "data.prompt_key=question"))
    renamed = _write(tmp_path / "renamed.parquet", [{k: v for k, v in GOOD_ROW.items() if k != "prompt"}])
    with pytest.raises(ConfigError, match=r"renamed.parquet' has no column 'prompt' \(data.prompt_key\)"):
        check_data_files(_config(renamed))


def test_the_rule_reward_needs_reward_model_ground_truth(tmp_path):
    no_reward = _write(tmp_path / "no_rm.parquet", [{"data_source": "openai/gsm8k", "prompt": PROMPT}])
    with pytest.raises(ConfigError, match=r"no_rm.parquet' has no column 'reward_model'; expected a struct with"):
        check_data_files(_config(no_reward))
    no_truth = _write(tmp_path / "no_gt.parquet", [{**GOOD_ROW, "reward_model": {"style": "rule"}}])
    with pytest.raises(ConfigError, match=r"column 'reward_model' has fields \['style'\] but no 'ground_truth'"):
        check_data_files(_config(no_truth))
    no_source = _write(tmp_path / "no_src.parquet", [{k: v for k, v in GOOD_ROW.items() if k != "data_source"}])
    with pytest.raises(ConfigError, match=r"no column 'data_source' \(data.reward_fn_key\)"):
        check_data_files(_config(no_source))


def test_a_custom_reward_or_a_reward_model_does_not_need_ground_truth(tmp_path):
    path = _write(tmp_path / "prompts.parquet", [{"prompt": PROMPT, "unused": 1}])
    check_data_files(_config(path, None, f"custom_reward_function.path={tmp_path / 'reward.py'}"))
    check_data_files(_config(path, None, "reward_model.enable=True"))


def test_a_vision_language_policy_without_image_columns_warns_only(tmp_path, caplog):
    path = _write(tmp_path / "text.parquet", [GOOD_ROW])
    with caplog.at_level(logging.WARNING, logger="verl.trainer.config.checks.data"):
        check_data_files(_config(path), policy_is_vlm=True)
    assert "has no 'images' (data.image_key)" in caplog.text


def test_files_read_by_a_custom_dataset_class_are_not_checked(tmp_path):
    """data.custom_cls reads the files its own way (verl runs a JSON file through one): nothing is required."""
    lines = tmp_path / "train.jsonl"
    lines.write_text('{"question": "1+1?"}\n')
    check_data_files(_config(str(lines), None, f"data.custom_cls.path={tmp_path / 'my_dataset.py'}"))


def test_remote_files_are_left_to_the_dataset():
    check_data_files(_config("hdfs://cluster/train.parquet"))


def test_main_ppo_refuses_bad_data_before_ray(tmp_path, monkeypatch):
    """main_ppo's run_ppo stops in prepare_config: ray.init is never reached."""
    import ray

    from tests.trainer.ppo_e2e_utils import base_overrides, make_workspace
    from verl.trainer.main_ppo import run_ppo

    def no_ray(*args, **kwargs):
        raise AssertionError("ray.init was called before the data was checked")

    monkeypatch.setattr(ray, "init", no_ray)
    workspace = make_workspace(tmp_path)
    no_reward = _write(tmp_path / "no_rm.parquet", [{"data_source": "openai/gsm8k", "prompt": PROMPT}] * 4)
    config = compose_config(base_overrides(workspace) + [f"data.train_files={no_reward}"])
    with pytest.raises(ConfigError, match="data.train_files: .*no_rm.parquet' has no column 'reward_model'"):
        run_ppo(config)
