"""Turn Geometry3K (image + geometry question + answer) into verl's multimodal RL parquet schema.

    python examples/data_preprocess/geo3k.py --local_dir ~/data/geo3k
    python examples/data_preprocess/geo3k.py --local_dataset_path /data/geometry3k      # offline: a local copy

By default the data comes from the Hugging Face hub (``hiyouga/geometry3k``). ``--local_dataset_path`` reads a local
copy instead, in the hub layout (``data/train-*.parquet``, ``data/test-*.parquet``; columns ``images``, ``problem``,
``answer``) or any layout ``gsm8k.py``'s reader accepts. Each output row keeps its images in the ``images`` column;
the ``<image>`` placeholder in the problem text marks where the image goes in the prompt.
"""

from __future__ import annotations

import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from gsm8k import load_splits, parse_args, write_splits  # noqa: E402

DATA_SOURCE = "hiyouga/geometry3k"
# asks for the format the geo3k scorer grades: reasoning inside <think></think>, the answer in \boxed{}
INSTRUCTION = (
    " Reason step by step inside <think> </think> tags first, then give the final answer in \\boxed{} after them."
)


def make_map_fn(split: str):
    """Row converter for ``datasets.map(..., with_indices=True)``: Geometry3K fields -> verl's RL schema."""

    def process(example: dict, idx: int) -> dict:
        problem = example["problem"]
        answer = example["answer"]
        return {
            "data_source": DATA_SOURCE,
            "prompt": [{"role": "user", "content": problem + INSTRUCTION}],
            "images": example["images"],
            "ability": "math",
            "reward_model": {"style": "rule", "ground_truth": answer},
            "extra_info": {"split": split, "index": idx, "answer": answer, "question": problem},
        }

    return process


def main(argv=None) -> None:
    args = parse_args("~/data/geo3k", argv)
    dataset = load_splits(DATA_SOURCE, None, args.local_dataset_path)
    write_splits(dataset, args.local_dir, args.hdfs_dir, make_map_fn)


if __name__ == "__main__":
    main()
