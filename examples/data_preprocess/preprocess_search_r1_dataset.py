"""Turn Search-R1 QA data (NQ, HotpotQA, ...: ``question`` + ``golden_answers`` rows) into verl's RL parquet schema.

    python examples/data_preprocess/preprocess_search_r1_dataset.py --local_dir ~/data/searchR1
    python examples/data_preprocess/preprocess_search_r1_dataset.py --local_dataset_path /data/nq/{split}.jsonl \\
        --data_source_name nq

By default the data comes from the Hugging Face hub (``PeterJinGo/nq_hotpotqa_train``). ``--local_dataset_path``
reads a local copy instead, in any layout ``gsm8k.py`` accepts (a directory with train/test parquet/jsonl/json
files, a ``save_to_disk`` directory, or a ``{split}`` pattern).

Each row becomes ``data_source = "searchR1_<name>"``, where ``<name>`` is the row's own ``data_source`` column
when it has one (Search-R1's merged files do) and ``--data_source_name`` otherwise; the default reward function
scores ``searchR1_`` + nq, triviaqa, popqa, hotpotqa, 2wikimultihopqa, musique and bamboogle by exact match of the
``<answer>`` against ``reward_model.ground_truth["target"]``. ``extra_info.tools_kwargs`` offers the ``search`` tool
(``examples/multiturn/config/tool_config/search_tool_config.yaml``) to every row.
"""

from __future__ import annotations

import argparse
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))  # sibling helpers when run as a script

from gsm8k import load_splits, parse_args, write_splits  # noqa: E402

HUB_NAME = "PeterJinGo/nq_hotpotqa_train"
SOURCE_PREFIX = "searchR1_"
SYSTEM_PROMPT = "You are a helpful assistant that answers questions by searching for the facts it lacks."
INSTRUCTION = (
    "Answer the question. Reason inside <think> and </think> each time you get new information. When you lack "
    "knowledge, search for it: call the search tool with your queries (a <search> step) and read the passages it "
    "returns. Search as many times as you need. When no more searching is needed, give only the final short answer "
    "inside <answer> and </answer>, without explanation, for example <answer> Paris </answer>."
)


def make_prompt(question: str) -> list[dict]:
    """The chat messages of one row: a system message and the instruction followed by the question."""
    question = question.strip()
    if not question.endswith("?"):
        question += "?"
    return [
        {"role": "system", "content": SYSTEM_PROMPT},
        {"role": "user", "content": f"{INSTRUCTION}\nQuestion: {question}"},
    ]


def golden_answer_list(golden_answers) -> list[str]:
    """``golden_answers`` as a list of strings (a single string, a list, or a numpy array read from parquet)."""
    if isinstance(golden_answers, str):
        return [golden_answers]
    answers = [str(a) for a in golden_answers]
    if not answers:
        raise ValueError("golden_answers: expected at least one answer, got an empty list")
    return answers


def make_map_fn(split: str, data_source_name: str):
    """Row converter for ``datasets.map(..., with_indices=True)``: Search-R1 QA rows -> verl's RL schema."""

    def process(example: dict, idx: int) -> dict:
        name = example.get("data_source") or data_source_name
        data_source = name if name.startswith(SOURCE_PREFIX) else SOURCE_PREFIX + name
        question = example["question"]
        ground_truth = {"target": golden_answer_list(example["golden_answers"])}
        return {
            "data_source": data_source,
            "prompt": make_prompt(question),
            "ability": "fact-reasoning",
            "reward_model": {"style": "rule", "ground_truth": ground_truth},
            "extra_info": {
                "split": split,
                "index": idx,
                "question": question,
                "need_tools_kwargs": True,
                # the question and answers travel to the tool too, for subclasses that reward good searches
                "tools_kwargs": {"search": {"create_kwargs": {"question": question, "ground_truth": ground_truth}}},
            },
        }

    return process


def main(argv=None) -> None:
    """Read the raw splits, convert every row, write ``train.parquet`` / ``test.parquet``."""
    own = argparse.ArgumentParser(add_help=False)
    own.add_argument("--data_source_name", default="nq", help="the <name> of searchR1_<name> for rows without one")
    extra, rest = own.parse_known_args(argv)
    args = parse_args("~/data/searchR1", rest)
    dataset = load_splits(HUB_NAME, None, args.local_dataset_path)
    name = extra.data_source_name
    write_splits(dataset, args.local_dir, args.hdfs_dir, lambda split: make_map_fn(split, name))


if __name__ == "__main__":
    main()
