"""Geometry3K for multi-turn rollouts with the ``calc_geo3k_reward`` tool (``verl.tools.geo3k_tool.Geo3kTool``).

    python examples/data_preprocess/geo3k_multiturn_w_tool.py --local_dir ~/data/geo3k_multiturn_w_tool
    python examples/data_preprocess/geo3k_multiturn_w_tool.py --local_dataset_path /data/geometry3k   # offline copy

Rows are ``geo3k.py``'s (images kept) plus a system prompt that asks for the tool, ``agent_name: tool_agent`` and,
in ``extra_info``, the ``tools_kwargs`` that hand each trajectory its ground truth
(``Geo3kTool.create(ground_truth=...)``).
Same sources and ``--local_dataset_path`` layouts as ``geo3k.py``; the default ``--local_dir`` is where verl's geo3k
multi-turn example reads its data.
"""

from __future__ import annotations

import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))  # sibling helpers when run as a script

import geo3k  # noqa: E402
from gsm8k import load_splits, parse_args, write_splits  # noqa: E402

TOOL_NAME = "calc_geo3k_reward"
SYSTEM_PROMPT = (
    "You are a careful geometry solver. Work through the question step by step before calling any tool. Once you "
    f"have an answer, call the `{TOOL_NAME}` tool at least once to check it, and revise your work if it is wrong."
)


def make_map_fn(split: str):
    """A ``make_map_fn(split)`` for multi-turn rows: ``geo3k.py``'s row with ``SYSTEM_PROMPT`` first, the tool agent
    loop, and the ``calc_geo3k_reward`` tool's create kwargs in ``extra_info``."""
    single_turn = geo3k.make_map_fn(split)

    def process(example: dict, idx: int) -> dict:
        row = single_turn(example, idx)
        ground_truth = row["reward_model"]["ground_truth"]
        row["prompt"] = [{"role": "system", "content": SYSTEM_PROMPT}, *row["prompt"]]
        row["agent_name"] = "tool_agent"
        row["extra_info"]["need_tools_kwargs"] = True
        row["extra_info"]["tools_kwargs"] = {TOOL_NAME: {"create_kwargs": {"ground_truth": ground_truth}}}
        return row

    return process


def main(argv=None) -> None:
    """Write ``train.parquet`` / ``test.parquet`` of tool-calling Geometry3K rows into ``--local_dir``."""
    args = parse_args("~/data/geo3k_multiturn_w_tool", argv)
    dataset = load_splits(geo3k.DATA_SOURCE, None, args.local_dataset_path)
    write_splits(dataset, args.local_dir, args.hdfs_dir, make_map_fn)


if __name__ == "__main__":
    main()
