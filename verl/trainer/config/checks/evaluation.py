"""Checks of the ``evaluation`` config of ``main_eval``: the generated file and its columns, the scoring function."""

from __future__ import annotations

import os

import pandas as pd
from omegaconf import DictConfig, OmegaConf

from verl.trainer.config import ConfigError

__all__ = ["check_eval_config"]


def check_eval_config(config: DictConfig) -> pd.DataFrame:
    """Check an ``evaluation`` config and return the table to score.

    Raises ConfigError naming the key, the value and what is expected (missing file, a column that is not there).
    """
    path = OmegaConf.select(config, "data.path")
    if not path or not os.path.isfile(os.path.expanduser(str(path))):
        raise ConfigError(f"data.path={path!r}: file does not exist; expected main_generation's output parquet")
    reward_path = OmegaConf.select(config, "custom_reward_function.path")
    if reward_path and not os.path.isfile(os.path.expanduser(str(reward_path))):
        raise ConfigError(f"custom_reward_function.path: file {reward_path!r} does not exist")
    if reward_path and not OmegaConf.select(config, "custom_reward_function.name"):
        raise ConfigError("custom_reward_function.name is empty; expected the scoring function's name")
    dataset = pd.read_parquet(os.path.expanduser(str(path)))
    for key in ("data.response_key", "data.data_source_key", "data.reward_model_key"):
        column = OmegaConf.select(config, key)
        if column not in dataset.columns:
            raise ConfigError(f"{key}={column!r} is not a column of data.path; columns: {list(dataset.columns)}")
    return dataset
