"""The built-in verifiable task: two-number addition ("37+45=" -> "82"), as RL and SFT parquet files.

``examples/data_preprocess/arithmetic.py`` is its command line; the shipped files under
``verl/assets/arithmetic`` (``builtin://arithmetic/*.parquet``) are its output with the default arguments.
``write_dataset`` writes to a folder:

* ``train.parquet`` / ``test.parquet``: verl's RL schema (``data_source="verl/arithmetic"``, ``prompt`` as chat
  messages, ``ability``, ``reward_model={"style": "rule", "ground_truth": "82"}``, ``extra_info``), scored by
  ``verl.utils.reward_score.arithmetic`` (exact match).
* ``sft_train.parquet`` / ``sft_test.parquet``: ``prompt`` / ``response`` strings for the SFT trainer. This is a
  *noisy SFT corpus*: a fixed share (``sft_noise``, default 0.6) of its answers are off by one (``a+b+1``).
  A model fitted to it prefers the wrong answer when decoding greedily, yet samples the right one about 40% of
  the time; RL with the exact-match reward then moves it to the correct mode (see docs/default_run.md).

Every problem ``a+b`` with ``0 <= a, b <= max_operand`` appears at most once; the test problems are held out
from both training sets. The same arguments always give the same rows.
"""

from __future__ import annotations

import os
import random

import pandas as pd

from verl.utils.reward_score.arithmetic import DATA_SOURCE

ABILITY = "arithmetic"

__all__ = ["DATA_SOURCE", "build_splits", "make_prompt", "rl_rows", "sft_rows", "write_dataset"]


def make_prompt(a: int, b: int) -> str:
    """The user message for ``a+b`` (short on purpose: byte-level tokens make every character cost compute)."""
    return f"{a}+{b}="


def build_splits(seed: int = 0, max_operand: int = 99, num_test: int = 200) -> tuple[list, list]:
    """(train, test) lists of ``(a, b)`` pairs: all pairs up to ``max_operand`` in a seeded order, test first."""
    if max_operand < 1:
        raise ValueError(f"max_operand={max_operand}; expected >= 1")
    pairs = [(a, b) for a in range(max_operand + 1) for b in range(max_operand + 1)]
    if not 0 < num_test < len(pairs):
        raise ValueError(f"num_test={num_test}; expected between 1 and {len(pairs) - 1} for max_operand={max_operand}")
    random.Random(seed).shuffle(pairs)
    return pairs[num_test:], pairs[:num_test]


def rl_rows(pairs: list, split: str) -> list[dict]:
    """Rows in verl's RL schema for ``pairs``; the ground truth is the exact sum as a string."""
    return [
        {
            "data_source": DATA_SOURCE,
            "prompt": [{"role": "user", "content": make_prompt(a, b)}],
            "ability": ABILITY,
            "reward_model": {"style": "rule", "ground_truth": str(a + b)},
            "extra_info": {"split": split, "index": i, "question": make_prompt(a, b), "answer": str(a + b)},
        }
        for i, (a, b) in enumerate(pairs)
    ]


def sft_rows(pairs: list, noise: float, seed: int) -> list[dict]:
    """``prompt``/``response`` rows; exactly ``round(noise * len(pairs))`` of them (seeded pick) answer ``a+b+1``."""
    if not 0.0 <= noise <= 1.0:
        raise ValueError(f"noise={noise}; expected a share between 0 and 1")
    noisy = set(random.Random(seed + 1).sample(range(len(pairs)), round(noise * len(pairs))))
    return [
        {"prompt": make_prompt(a, b), "response": str(a + b + (1 if i in noisy else 0)), "noisy": i in noisy}
        for i, (a, b) in enumerate(pairs)
    ]


def write_dataset(
    local_dir: str,
    seed: int = 0,
    max_operand: int = 99,
    num_test: int = 200,
    num_rl_train: int = 2000,
    sft_noise: float = 0.6,
) -> dict[str, str]:
    """Write the four parquet files into ``local_dir``; returns ``{name: path}``.

    The RL train set is the first ``num_rl_train`` training pairs; the SFT set uses every training pair.
    """
    train, test = build_splits(seed, max_operand, num_test)
    if not 0 < num_rl_train <= len(train):
        raise ValueError(f"num_rl_train={num_rl_train}; expected between 1 and {len(train)}")
    local_dir = os.path.expanduser(local_dir)
    os.makedirs(local_dir, exist_ok=True)
    frames = {
        "train": pd.DataFrame(rl_rows(train[:num_rl_train], "train")),
        "test": pd.DataFrame(rl_rows(test, "test")),
        "sft_train": pd.DataFrame(sft_rows(train, sft_noise, seed)),
        "sft_test": pd.DataFrame(sft_rows(test, sft_noise, seed)),
    }
    paths = {}
    for name, frame in frames.items():
        paths[name] = os.path.join(local_dir, f"{name}.parquet")
        frame.to_parquet(paths[name], index=False)
    return paths
