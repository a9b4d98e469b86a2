"""GSM8K as multi-turn SFT data: a ``messages`` column (user question, assistant worked answer).

    python examples/data_preprocess/gsm8k_multiturn_sft.py --local_dir ~/data/gsm8k_sft
    torchrun --nproc_per_node=2 -m verl.trainer.fsdp_sft_trainer data.multiturn.enable=true \\
        data.train_files=~/data/gsm8k_sft/train.parquet data.val_files=~/data/gsm8k_sft/test.parquet ...

Same sources and ``--local_dataset_path`` layouts as ``gsm8k.py``.
"""

from __future__ import annotations

import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))  # sibling helpers when run as a script

from gsm8k import DATA_SOURCE, INSTRUCTION, extract_solution, load_splits, parse_args, write_splits  # noqa: E402


def make_map_fn(split: str):
    """Row converter: GSM8K fields -> ``messages`` plus ``data_source`` and ``extra_info``."""

    def process(example: dict, idx: int) -> dict:
        return {
            "data_source": DATA_SOURCE,
            "messages": [
                {"role": "user", "content": example["question"] + " " + INSTRUCTION},
                {"role": "assistant", "content": example["answer"]},
            ],
            "extra_info": {"split": split, "index": idx, "ground_truth": extract_solution(example["answer"])},
        }

    return process


def main(argv=None) -> None:
    args = parse_args("~/data/gsm8k_sft", argv)
    dataset = load_splits(DATA_SOURCE, "main", args.local_dataset_path)
    write_splits(dataset, args.local_dir, args.hdfs_dir, make_map_fn)


if __name__ == "__main__":
    main()
