"""The char_count task: "how many a in cabbage?" -> "2". Writes SFT and RL parquet files, seeded, offline.

    python -m recipe.char_count.create_dataset --local_dir ~/data/char_count

Words are random strings of ``--min_len``..``--max_len`` letters from a small alphabet (``--alphabet``), so a
letter appears 0 to a few times; the asked letter is drawn from the whole alphabet, so "0" is a possible answer.
Every (letter, word) problem appears at most once and the test problems are held out from both training sets.

Writes to ``--local_dir``:

* ``sft_train.parquet`` / ``sft_test.parquet``: ``prompt`` / ``response`` strings for the SFT trainer. A share
  ``--sft_noise`` (default 0.6) of these answers is one too many (a sloppy annotator's systematic error): a model
  fitted to them learns to count but prefers the wrong answer, which RL with an exact-match reward then fixes;
* ``train.parquet`` / ``test.parquet``: verl's RL schema (``data_source="char_count"``, ``prompt`` as chat
  messages, ``reward_model={"style": "rule", "ground_truth": "2"}``, ``extra_info``), scored by
  ``recipe/char_count/reward_function.py``.
"""

from __future__ import annotations

import argparse
import os
import random

import pandas as pd

DATA_SOURCE = "char_count"

__all__ = ["DATA_SOURCE", "make_problems", "make_prompt", "rl_rows", "sft_rows", "write_dataset"]


def make_prompt(letter: str, word: str) -> str:
    """The user message asking how often ``letter`` occurs in ``word`` (short: every character is a token)."""
    return f"how many {letter} in {word}?"


def make_problems(n: int, seed: int = 0, alphabet: str = "abcd", min_len: int = 4, max_len: int = 9) -> list:
    """``n`` distinct ``(letter, word, count)`` problems in a seeded order."""
    if len(set(alphabet)) != len(alphabet) or not alphabet.isalpha():
        raise ValueError(f"alphabet={alphabet!r}; expected distinct letters")
    if not 1 <= min_len <= max_len:
        raise ValueError(f"min_len={min_len}, max_len={max_len}; expected 1 <= min_len <= max_len")
    possible = len(alphabet) * sum(len(alphabet) ** k for k in range(min_len, max_len + 1))
    if n > possible // 2:  # drawing near the whole space by rejection would crawl
        raise ValueError(f"n={n} problems asked for, but only {possible} exist; use longer words or more letters")
    rng = random.Random(seed)
    seen, problems = set(), []
    while len(problems) < n:
        word = "".join(rng.choice(alphabet) for _ in range(rng.randint(min_len, max_len)))
        letter = rng.choice(alphabet)
        if (letter, word) not in seen:
            seen.add((letter, word))
            problems.append((letter, word, word.count(letter)))
    return problems


def sft_rows(problems: list, noise: float = 0.0, seed: int = 0) -> list[dict]:
    """``prompt`` / ``response`` rows, the count as a decimal string; exactly ``round(noise * len(problems))`` of
    them (a seeded pick) answer one too many."""
    if not 0.0 <= noise <= 1.0:
        raise ValueError(f"noise={noise}; expected a share between 0 and 1")
    noisy = set(random.Random(seed + 1).sample(range(len(problems)), round(noise * len(problems))))
    return [
        {"prompt": make_prompt(c, w), "response": str(n + (i in noisy)), "noisy": i in noisy}
        for i, (c, w, n) in enumerate(problems)
    ]


def rl_rows(problems: list, split: str) -> list[dict]:
    """Rows in verl's RL schema; the ground truth is the count as a string."""
    return [
        {
            "data_source": DATA_SOURCE,
            "prompt": [{"role": "user", "content": make_prompt(c, w)}],
            "ability": "counting",
            "reward_model": {"style": "rule", "ground_truth": str(n)},
            "extra_info": {"split": split, "index": i, "letter": c, "word": w},
        }
        for i, (c, w, n) in enumerate(problems)
    ]


def write_dataset(
    local_dir: str,
    seed: int = 0,
    num_train: int = 20000,
    num_test: int = 200,
    num_rl_train: int = 1000,
    sft_noise: float = 0.6,
    **task,
) -> dict[str, str]:
    """Write the four parquet files into ``local_dir``; returns ``{name: path}``.

    The first ``num_test`` problems are the test set; SFT trains on the next ``num_train``, RL on the first
    ``num_rl_train`` of those (RL prompts the model has seen in SFT, as in a real pipeline; the test set is new
    to both). ``task`` goes to :func:`make_problems` (alphabet, min_len, max_len).
    """
    problems = make_problems(num_test + num_train, seed, **task)
    return write_splits(
        local_dir, problems, num_test, num_rl_train, lambda rows: sft_rows(rows, sft_noise, seed), rl_rows
    )


def write_splits(local_dir: str, problems: list, num_test: int, num_rl_train: int, sft_rows_fn, rl_rows_fn) -> dict:
    """Split ``problems`` (test first, then train) and write ``sft_train/sft_test/train/test.parquet``.

    ``sft_rows_fn(problems)`` and ``rl_rows_fn(problems, split)`` make the rows; RL trains on the first
    ``num_rl_train`` SFT problems. Shared with the other recipes that do SFT then RL on generated data.
    """
    test, train = problems[:num_test], problems[num_test:]
    if not 0 < num_rl_train <= len(train):
        raise ValueError(f"num_rl_train={num_rl_train}; expected between 1 and num_train={len(train)}")
    local_dir = os.path.expanduser(local_dir)
    os.makedirs(local_dir, exist_ok=True)
    frames = {
        "sft_train": pd.DataFrame(sft_rows_fn(train)),
        "sft_test": pd.DataFrame(sft_rows_fn(test)),
        "train": pd.DataFrame(rl_rows_fn(train[:num_rl_train], "train")),
        "test": pd.DataFrame(rl_rows_fn(test, "test")),
    }
    paths = {}
    for name, frame in frames.items():
        paths[name] = os.path.join(local_dir, f"{name}.parquet")
        frame.to_parquet(paths[name], index=False)
    return paths


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--local_dir", default="~/data/char_count")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--num_train", type=int, default=20000, help="SFT problems")
    parser.add_argument("--num_test", type=int, default=200, help="held-out problems (SFT and RL test sets)")
    parser.add_argument("--num_rl_train", type=int, default=1000, help="RL prompts (a subset of the SFT problems)")
    parser.add_argument("--sft_noise", type=float, default=0.6, help="share of SFT answers that are one too many")
    parser.add_argument("--alphabet", default="abcd")
    parser.add_argument("--min_len", type=int, default=4)
    parser.add_argument("--max_len", type=int, default=9)
    args = parser.parse_args(argv)
    paths = write_dataset(
        args.local_dir,
        args.seed,
        args.num_train,
        args.num_test,
        args.num_rl_train,
        args.sft_noise,
        alphabet=args.alphabet,
        min_len=args.min_len,
        max_len=args.max_len,
    )
    for name, path in paths.items():
        print(f"{name}: {path}")


if __name__ == "__main__":
    main()
