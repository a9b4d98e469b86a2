"""GSM8K for multi-turn rollouts with the ``calc_gsm8k_reward`` tool (``verl.tools.gsm8k_tool.Gsm8kTool``).

    python examples/data_preprocess/gsm8k_multiturn_w_tool.py --local_dir ~/data/gsm8k
    python examples/data_preprocess/gsm8k_multiturn_w_tool.py --local_dataset_path /data/gsm8k   # offline copy

Rows are ``gsm8k.py``'s plus a system prompt and, in ``extra_info``, the ``tools_kwargs`` that hand each trajectory
its ground truth (``Gsm8kTool.create(ground_truth=...)``) and the ``interaction_kwargs`` of the GSM8K interaction.
Same sources and ``--local_dataset_path`` layouts as ``gsm8k.py``; the default ``--local_dir`` is verl's, which is
also where ``gsm8k.py`` writes.
"""

from __future__ import annotations

import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))  # sibling helpers when run as a script

import gsm8k  # noqa: E402

TOOL_NAME = "calc_gsm8k_reward"
SYSTEM_PROMPT = (
    "You are a careful math solver. Work through the question step by step before calling any tool. Once you have "
    f"an answer, call the `{TOOL_NAME}` tool at least once to check it, and revise your work if it is wrong. "
    "Write your final answer as `#### <answer>`."
)
USER_INSTRUCTION = "Let's think step by step and output the final answer after `####`."


def make_multiturn_map_fn(system_prompt: str, with_tools: bool):
    """A ``make_map_fn(split)`` for multi-turn rows: ``gsm8k.py``'s row with ``system_prompt`` before the question,
    ``interaction_kwargs`` in ``extra_info`` and, if ``with_tools``, the ``calc_gsm8k_reward`` tool's kwargs."""

    def make_map_fn(split: str):
        single_turn = gsm8k.make_map_fn(split)

        def process(example: dict, idx: int) -> dict:
            row = single_turn(example, idx)
            question, ground_truth = example["question"], row["reward_model"]["ground_truth"]
            row["prompt"] = [
                {"role": "system", "content": system_prompt},
                {"role": "user", "content": question + " " + USER_INSTRUCTION},
            ]
            extra = {"interaction_kwargs": {"name": "gsm8k", "query": question, "ground_truth": ground_truth}}
            if with_tools:
                extra["need_tools_kwargs"] = True
                extra["tools_kwargs"] = {TOOL_NAME: {"create_kwargs": {"ground_truth": ground_truth}}}
            row["extra_info"].update(extra)
            return row

        return process

    return make_map_fn


make_map_fn = make_multiturn_map_fn(SYSTEM_PROMPT, with_tools=True)


def run(map_fn_factory, default_dir: str, argv=None) -> None:
    """Parse ``gsm8k.py``'s command line, read GSM8K and write ``map_fn_factory``'s rows to ``--local_dir``."""
    args = gsm8k.parse_args(default_dir, argv)
    dataset = gsm8k.load_splits(gsm8k.DATA_SOURCE, "main", args.local_dataset_path)
    gsm8k.write_splits(dataset, args.local_dir, args.hdfs_dir, map_fn_factory)


def main(argv=None) -> None:
    """Write ``train.parquet`` / ``test.parquet`` of tool-calling GSM8K rows into ``--local_dir``."""
    run(make_map_fn, "~/data/gsm8k", argv)


if __name__ == "__main__":
    main()
