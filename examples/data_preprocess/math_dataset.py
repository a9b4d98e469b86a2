"""Turn MATH (``DigitalLearningGmbH/MATH-lighteval``) into verl's RL parquet schema.

    python examples/data_preprocess/math_dataset.py --local_dir ~/data/math
    python examples/data_preprocess/math_dataset.py --local_dataset_path /data/math   # offline: a local copy

The ground truth is the content of the last ``\\boxed{...}`` in the reference solution. ``--local_dataset_path``
accepts the same layouts as ``gsm8k.py`` (a directory with train/test parquet/jsonl/json files, a
``save_to_disk`` directory, or a ``{split}`` pattern).
"""

from __future__ import annotations

import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))  # sibling helpers when run as a script

from gsm8k import load_splits, parse_args, write_splits  # noqa: E402

from verl.utils.reward_score.math import last_boxed_only_string, remove_boxed  # noqa: E402

DATA_SOURCE = "DigitalLearningGmbH/MATH-lighteval"
INSTRUCTION = "Let's think step by step and output the final answer within \\boxed{}."


def extract_solution(solution: str) -> str:
    """The content of the last ``\\boxed{...}`` of a MATH solution."""
    boxed = last_boxed_only_string(solution)
    if boxed is None:
        raise ValueError(f"MATH solution has no \\boxed{{}} answer: {solution[-80:]!r}")
    return remove_boxed(boxed)


def make_map_fn(split: str):
    """Row converter for ``datasets.map(..., with_indices=True)``: MATH fields -> verl's RL schema."""

    def process(example: dict, idx: int) -> dict:
        return {
            "data_source": DATA_SOURCE,
            "prompt": [{"role": "user", "content": example["problem"] + " " + INSTRUCTION}],
            "ability": "math",
            "reward_model": {"style": "rule", "ground_truth": extract_solution(example["solution"])},
            "extra_info": {"split": split, "index": idx},
        }

    return process


def main(argv=None) -> None:
    args = parse_args("~/data/math", argv)
    dataset = load_splits(DATA_SOURCE, None, args.local_dataset_path)
    write_splits(dataset, args.local_dir, args.hdfs_dir, make_map_fn)


if __name__ == "__main__":
    main()
