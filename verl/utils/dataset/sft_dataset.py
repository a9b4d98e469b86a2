"""Single-turn SFT dataset: a prompt column and a response column, templated and right-padded to ``max_length``."""

from __future__ import annotations

import logging
import os
from collections.abc import Sequence

import numpy as np
import pandas as pd
import torch
from omegaconf import ListConfig
from torch.utils.data import Dataset

from verl.utils.model import compute_position_id_with_mask
from verl.utils.py_functional import as_list

logger = logging.getLogger(__name__)

__all__ = ["SFTDataset"]

_TRUNCATIONS = ("error", "left", "right")


def _cfg_get(config, key: str, default):
    """``config.get(key, default)`` for dict or OmegaConf configs; an explicit null also gives ``default``."""
    value = config.get(key, default) if config is not None else default
    return default if value is None else value


def _unwrap(value):
    """Take the only element out of a length-1 Series / array / list (parquet wraps struct and list cells)."""
    while isinstance(value, pd.Series | np.ndarray | list | tuple) and len(value) == 1:
        value = value.iloc[0] if isinstance(value, pd.Series) else value[0]
    return value


def _read_parquets(files: Sequence[str], use_shm: bool) -> pd.DataFrame:
    """Copy each file locally (remote ones) and concatenate them with pandas."""
    from verl.utils.fs import copy_to_local

    frames = []
    for path in files:
        local = copy_to_local(os.path.expanduser(path), verbose=False, use_shm=use_shm)
        if not os.path.exists(local):
            raise FileNotFoundError(f"SFT data file {path!r} (data.train_files / data.val_files) does not exist")
        frames.append(pd.read_parquet(local))
    return pd.concat(frames, ignore_index=True)


def extract_text_column(dataframe: pd.DataFrame, key: str, dict_keys, config_key: str) -> list[str]:
    """The strings of column ``key``, each cell navigated through ``dict_keys`` (``cell[k1][k2]...``).

    Lets ``prompt=[{"role": "user", "content": ...}]`` with ``dict_keys=["content"]`` or an ``extra_info`` struct
    with ``["question"]`` feed the dataset directly.
    """
    if key not in dataframe.columns:
        raise KeyError(f"{config_key}={key!r} is not a column of the SFT data; columns are {list(dataframe.columns)}")
    texts = []
    for row, cell in enumerate(dataframe[key]):
        value = cell
        for name in as_list(dict_keys):
            value = _unwrap(value)
            try:
                value = value[name]
            except (KeyError, IndexError, TypeError) as e:
                raise KeyError(
                    f"row {row}: cannot read {name!r} from column {key!r} ({config_key} dict keys {dict_keys}): {e!r}"
                ) from e
        texts.append(str(_unwrap(value)))
    return texts


class SFTDataset(Dataset):
    """Prompt/response pairs from parquet files for supervised fine-tuning.

    Each item is a dict of ``input_ids``, ``attention_mask``, ``position_ids`` and ``loss_mask``, all ``(max_length,)``
    long tensors. The prompt is templated as one user message with the generation prompt; the response gets the EOS
    token. ``loss_mask[t] = 1`` marks the positions whose next-token prediction is trained: the last prompt token
    through the second-to-last response token, so that every response token (EOS included) is learned.
    """

    def __init__(self, parquet_files: str | Sequence[str], tokenizer, config):
        config = {} if config is None else config
        self.prompt_key = _cfg_get(config, "prompt_key", "prompt")
        self.prompt_dict_keys = _cfg_get(config, "prompt_dict_keys", None)
        self.response_key = _cfg_get(config, "response_key", "response")
        self.response_dict_keys = _cfg_get(config, "response_dict_keys", None)
        self.max_length = int(_cfg_get(config, "max_length", 1024))
        self.truncation = _cfg_get(config, "truncation", "error")
        self.use_shm = bool(_cfg_get(config, "use_shm", False))
        if self.truncation not in _TRUNCATIONS:
            raise ValueError(f"data.truncation={self.truncation!r} is not supported; expected one of {_TRUNCATIONS}")
        if self.max_length <= 1:
            raise ValueError(f"data.max_length={self.max_length} must be an integer > 1")
        if isinstance(tokenizer, str):
            from verl.utils.tokenizer import hf_tokenizer

            tokenizer = hf_tokenizer(tokenizer)
        self.tokenizer = tokenizer
        files = [parquet_files] if not isinstance(parquet_files, list | tuple | ListConfig) else list(parquet_files)
        self.parquet_files = files
        self.dataframe = _read_parquets(files, self.use_shm)
        self.prompts = extract_text_column(self.dataframe, self.prompt_key, self.prompt_dict_keys, "data.prompt_key")
        self.responses = extract_text_column(
            self.dataframe, self.response_key, self.response_dict_keys, "data.response_key"
        )

    def __len__(self) -> int:
        return len(self.prompts)

    def _pad_id(self) -> int:
        pad = self.tokenizer.pad_token_id
        return pad if pad is not None else (self.tokenizer.eos_token_id or 0)

    def __getitem__(self, item: int) -> dict[str, torch.Tensor]:
        tokenizer = self.tokenizer
        prompt_text = tokenizer.apply_chat_template(
            [{"role": "user", "content": self.prompts[item]}], add_generation_prompt=True, tokenize=False
        )
        response_text = self.responses[item] + tokenizer.eos_token
        prompt_ids = tokenizer(prompt_text, add_special_tokens=False)["input_ids"]
        response_ids = tokenizer(response_text, add_special_tokens=False)["input_ids"]
        prompt_len, response_len = len(prompt_ids), len(response_ids)
        total = prompt_len + response_len

        input_ids = torch.tensor(prompt_ids + response_ids, dtype=torch.long)
        loss_mask = torch.ones(total, dtype=torch.long)
        # Built on the untruncated sequence so truncation cuts mask and tokens identically.
        if prompt_len > 1:
            loss_mask[: prompt_len - 1] = 0
        loss_mask[total - 1] = 0  # the prediction after EOS is not trained
        attention_mask = torch.ones(total, dtype=torch.long)

        if total > self.max_length:
            if self.truncation == "left":
                keep = slice(total - self.max_length, total)
            elif self.truncation == "right":
                keep = slice(0, self.max_length)
            else:
                raise NotImplementedError(
                    f"sample {item} has {total} tokens > data.max_length={self.max_length} and data.truncation=error"
                )
            input_ids, attention_mask, loss_mask = input_ids[keep], attention_mask[keep], loss_mask[keep]
        elif total < self.max_length:
            pad = self.max_length - total
            input_ids = torch.cat([input_ids, input_ids.new_full((pad,), self._pad_id())])
            attention_mask = torch.cat([attention_mask, attention_mask.new_zeros(pad)])
            loss_mask = torch.cat([loss_mask, loss_mask.new_zeros(pad)])

        return {
            "input_ids": input_ids,
            "attention_mask": attention_mask,
            "position_ids": compute_position_id_with_mask(attention_mask),
            "loss_mask": loss_mask,
        }
