"""Multi-turn SFT dataset: chat conversations whose assistant turns (and only those) are trained."""

from __future__ import annotations

import logging
from collections.abc import Sequence

import numpy as np
import torch
from omegaconf import DictConfig, ListConfig, OmegaConf
from torch.utils.data import Dataset

from verl.utils.dataset.sft_dataset import _read_parquets

logger = logging.getLogger(__name__)

__all__ = ["MultiTurnSFTDataset"]

_ROLES = ("system", "user", "assistant", "tool")
_TRUNCATIONS = ("error", "left", "right")


def _to_python(value):
    """Plain lists/dicts from parquet cells (numpy arrays of dicts, nested arrays)."""
    if isinstance(value, np.ndarray):
        return [_to_python(v) for v in value.tolist()]
    if isinstance(value, list | tuple):
        return [_to_python(v) for v in value]
    if isinstance(value, dict):
        return {k: _to_python(v) for k, v in value.items()}
    return value


def _get(config, key: str, default):
    value = config.get(key, default) if config is not None else default
    return default if value is None else value


class MultiTurnSFTDataset(Dataset):
    """Conversations (a ``messages`` column of ``{"role", "content"}`` dicts) from parquet files.

    Each item holds ``input_ids``, ``attention_mask``, ``position_ids`` and ``loss_mask``, all ``(max_length,)``
    long tensors. ``loss_mask`` is 1 on the tokens of every assistant turn (its content and the template's closing
    tokens) and 0 on system, user and tool messages, on the generation prompt that opens an assistant turn, and on
    padding.
    """

    def __init__(self, parquet_files: str | Sequence[str], tokenizer, config=None):
        config = {} if config is None else config
        if isinstance(config, DictConfig):
            config = OmegaConf.to_container(config, resolve=True)
        multiturn = _get(config, "multiturn", {}) or {}
        self.truncation = _get(config, "truncation", "error")
        self.max_length = int(_get(config, "max_length", 1024))
        self.messages_key = _get(multiturn, "messages_key", "messages")
        self.tools_key = _get(multiturn, "tools_key", "tools")
        self.enable_thinking_key = _get(multiturn, "enable_thinking_key", "enable_thinking")
        self.use_shm = bool(_get(config, "use_shm", False))
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
        if self.messages_key not in self.dataframe.columns:
            raise KeyError(
                f"data.multiturn.messages_key={self.messages_key!r} is not a column of {files}; "
                f"columns are {list(self.dataframe.columns)}"
            )
        self.messages = [_to_python(m) for m in self.dataframe[self.messages_key]]
        self.tools = self._optional_column(self.tools_key)
        self.enable_thinking = self._optional_column(self.enable_thinking_key)

    def _optional_column(self, key: str) -> list | None:
        if key not in self.dataframe.columns:
            return None
        return [_to_python(v) for v in self.dataframe[key]]

    def __len__(self) -> int:
        return len(self.messages)

    # ------------------------------------------------------------------------------------------------------------
    # token assembly
    # ------------------------------------------------------------------------------------------------------------
    def _render(self, messages: list[dict], add_generation_prompt: bool, tools, enable_thinking) -> str:
        """The chat-template text of ``messages`` ("" for none: some templates fail on an empty conversation)."""
        if not messages and not add_generation_prompt:
            return ""
        kwargs = {}
        if tools:
            kwargs["tools"] = tools
        if enable_thinking is not None:
            kwargs["enable_thinking"] = bool(enable_thinking)
        return self.tokenizer.apply_chat_template(
            messages, tokenize=False, add_generation_prompt=add_generation_prompt, **kwargs
        )

    def _encode(self, text: str) -> list[int]:
        return self.tokenizer(text, add_special_tokens=False)["input_ids"] if text else []

    def _segment(self, before: str, after: str, where: str) -> str:
        """The text ``after`` adds to ``before``.

        Templates that rewrite earlier turns (e.g. dropping old reasoning) do not render a conversation as a growing
        prefix; then the text after the longest common prefix is used and the whole-conversation check warns.
        """
        if after.startswith(before):
            return after[len(before) :]
        common = 0
        for a, b in zip(before, after):
            if a != b:
                break
            common += 1
        logger.warning("the chat template does not render %s as an extension of the earlier turns", where)
        return after[common:]

    def _tokenize_conversation(self, item: int) -> tuple[list[int], list[int]]:
        """Token ids and per-token loss flags of conversation ``item`` (unpadded, untruncated)."""
        messages = self.messages[item]
        tools = self.tools[item] if self.tools is not None else None
        thinking = self.enable_thinking[item] if self.enable_thinking is not None else None
        for i, message in enumerate(messages):
            role = message.get("role")
            if role not in _ROLES:
                raise ValueError(f"sample {item} message {i}: role {role!r} is not one of {_ROLES}")
            if role == "system" and i != 0:
                raise ValueError(f"sample {item} message {i}: a system message is only allowed first")

        ids: list[int] = []
        loss: list[int] = []

        def add(text: str, flag: int) -> None:
            tokens = self._encode(text)
            ids.extend(tokens)
            loss.extend([flag] * len(tokens))

        i = 0
        while i < len(messages):
            before = self._render(messages[:i], False, tools, thinking)
            role = messages[i]["role"]
            if role == "assistant":
                with_prompt = self._render(messages[:i], True, tools, thinking)
                add(self._segment(before, with_prompt, f"the generation prompt before message {i}"), 0)
                turn = self._render(messages[: i + 1], False, tools, thinking)
                add(self._segment(with_prompt, turn, f"assistant message {i}"), 1)
                i += 1
                continue
            end = i + 1
            if role == "tool":  # a run of tool results is rendered (and masked) as one block
                while end < len(messages) and messages[end]["role"] == "tool":
                    end += 1
            after = self._render(messages[:end], False, tools, thinking)
            add(self._segment(before, after, f"message {i}"), 0)
            i = end

        whole = self._encode(self._render(messages, False, tools, thinking))
        if whole != ids:
            logger.warning(
                "sample %d: tokenizing the conversation turn by turn differs from tokenizing it whole "
                "(%d vs %d tokens); the turn-by-turn tokens are used",
                item,
                len(ids),
                len(whole),
            )
        return ids, loss

    def __getitem__(self, item: int) -> dict[str, torch.Tensor]:
        ids, loss = self._tokenize_conversation(item)
        input_ids = torch.tensor(ids, dtype=torch.long)
        loss_mask = torch.tensor(loss, dtype=torch.long)
        attention_mask = torch.ones_like(input_ids)
        length = input_ids.numel()
        if length > self.max_length:
            if self.truncation == "left":
                keep = slice(length - self.max_length, length)
            elif self.truncation == "right":
                keep = slice(0, self.max_length)
            else:
                raise ValueError(
                    f"sample {item} has {length} tokens > data.max_length={self.max_length} and data.truncation=error"
                )
            input_ids, attention_mask, loss_mask = input_ids[keep], attention_mask[keep], loss_mask[keep]
        elif length < self.max_length:
            pad = self.max_length - length
            pad_id = self.tokenizer.pad_token_id if self.tokenizer.pad_token_id is not None else 0
            input_ids = torch.cat([input_ids, input_ids.new_full((pad,), pad_id)])
            attention_mask = torch.cat([attention_mask, attention_mask.new_zeros(pad)])
            loss_mask = torch.cat([loss_mask, loss_mask.new_zeros(pad)])
        position_ids = torch.arange(self.max_length, dtype=torch.long) * attention_mask
        return {
            "input_ids": input_ids,
            "attention_mask": attention_mask,
            "position_ids": position_ids,
            "loss_mask": loss_mask,
        }
