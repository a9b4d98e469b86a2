"""Generation dumps: `trainer.rollout_data_dir` / `trainer.validation_data_dir` as `{step}.jsonl` files.

One JSON object per sample, `{"input", "output", "score", "step", <reward extra info keys>...}`,
non-ASCII kept as is, each line newline-terminated. A step's file is rewritten when that step runs
again (e.g. after resuming from an earlier checkpoint).
"""

from __future__ import annotations

import json
import logging
import os
from collections.abc import Sequence
from typing import Any

import numpy as np

logger = logging.getLogger(__name__)

__all__ = ["dump_generations", "load_generations", "rollout_generations", "select_val_generations"]


def _plain(value: Any) -> Any:
    """numpy / torch values -> JSON-native Python values (0-d -> scalar, arrays -> lists)."""
    if hasattr(value, "detach"):  # torch tensor
        value = value.detach().cpu()
    if hasattr(value, "tolist") and not isinstance(value, str | bytes):
        return value.tolist()
    if isinstance(value, bytes):
        return value.decode("utf-8", errors="replace")
    if isinstance(value, dict):
        return {str(k): _plain(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_plain(v) for v in value]
    return value


def dump_generations(
    inputs: Sequence[str],
    outputs: Sequence[str],
    scores: Sequence[float],
    reward_extra_infos_dict: dict[str, Sequence[Any]] | None,
    dump_path: str,
    step: int,
) -> str:
    """Write `{dump_path}/{step}.jsonl`, one line per sample; returns the file path.

    `reward_extra_infos_dict` entries whose length is not the number of samples are left out (as verl does).
    """
    n = len(inputs)
    if len(outputs) != n or len(scores) != n:
        raise ValueError(
            f"dump_generations: inputs, outputs and scores must have one entry per sample; "
            f"got {n}, {len(outputs)} and {len(scores)}"
        )
    scores = _plain(scores)
    columns: dict[str, list] = {}
    skipped = []
    for key, values in (reward_extra_infos_dict or {}).items():
        if key in ("input", "output", "score", "step"):
            raise ValueError(f"reward_extra_infos_dict: key {key!r} would overwrite a dump column; rename it")
        if values is not None and len(values) == n:
            columns[key] = _plain(values)
        else:
            skipped.append(key)
    if skipped:
        logger.debug("dump_generations: extra infos without one entry per sample left out: %s", skipped)

    os.makedirs(dump_path, exist_ok=True)
    path = os.path.join(dump_path, f"{step}.jsonl")
    with open(path, "w", encoding="utf-8") as f:
        for i in range(n):
            entry = {"input": inputs[i], "output": outputs[i], "score": scores[i], "step": step}
            for key, values in columns.items():
                entry[key] = values[i]
            f.write(json.dumps(entry, ensure_ascii=False) + "\n")
    logger.info("dumped %d generations to %s", n, path)
    return path


def select_val_generations(
    inputs: Sequence[str], outputs: Sequence[str], scores: Sequence[float], n: int, seed: int = 42
) -> list[tuple[str, str, float]]:
    """The `trainer.log_val_generations` samples: first `n` of (input, output, score) sorted by input, then shuffled.

    The fixed seed shows the same prompts at every validation, whatever order the samples arrived in.
    """
    if n <= 0:
        return []
    samples = sorted(zip(inputs, outputs, _plain(scores)), key=lambda sample: sample[0])
    order = np.random.RandomState(seed).permutation(len(samples))
    return [samples[i] for i in order[:n]]


def load_generations(path: str) -> list[dict]:
    """Read back a dump written by `dump_generations` (one dict per sample)."""
    with open(path, encoding="utf-8") as f:
        return [json.loads(line) for line in f if line.strip()]


def rollout_generations(batch, tokenizer) -> tuple[list[str], list[str], list[float]]:
    """(inputs, outputs, scores) of a training batch for the rollout dump.

    Decodes `prompts` `(bs, prompt_length)` and `responses` `(bs, response_length)` without special tokens
    (padding included); scores are `token_level_scores.sum(-1)`.
    """
    inputs = tokenizer.batch_decode(batch.batch["prompts"], skip_special_tokens=True)
    outputs = tokenizer.batch_decode(batch.batch["responses"], skip_special_tokens=True)
    scores = batch.batch["token_level_scores"].sum(-1).cpu().tolist()
    return inputs, outputs, scores
