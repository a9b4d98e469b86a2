"""Build the R1 evaluation parquet (verl's RL schema) from local benchmark files; nothing is downloaded.

    python recipe/r1/data_process.py --local_dataset_path ~/bench/math500.jsonl ~/bench/gpqa_diamond.csv \\
        --tasks math gpqa --local_dir ~/data/r1

Each ``--local_dataset_path`` file (jsonl, json, parquet or csv) is read with the task at the same position of
``--tasks`` (one task applies to every file):

* ``math``: a ``problem`` (or ``question``) column and an ``answer`` column, or a MATH-style ``solution`` whose last
  ``\\boxed{}`` is the answer (MATH-500, AIME, CNMO exports).
* ``gpqa``: GPQA's ``Question``, ``Correct Answer``, ``Incorrect Answer 1..3`` columns; the four options are
  shuffled with a seed per row, so the correct letter is fixed and reproducible.

``--data_sources`` names each file's data source (default ``HuggingFaceH4/MATH-500`` / ``Idavidrein/gpqa``), which
is how ``recipe/r1/reward_score.py`` routes the scoring and how ``main_eval`` groups its metrics. The rows of all
files go to ``{local_dir}/test.parquet``.
"""

from __future__ import annotations

import argparse
import os
import random

import pandas as pd

MATH_INSTRUCTION = "Please reason step by step, and put your final answer within \\boxed{}."
GPQA_TEMPLATE = (
    "Answer the following multiple choice question. The last line of your response should be of the form "
    "'Answer: $LETTER' (without quotes) where LETTER is one of ABCD. Think step by step before answering.\n\n"
    "{question}\n\nA) {A}\nB) {B}\nC) {C}\nD) {D}"
)
DEFAULT_SOURCES = {"math": "HuggingFaceH4/MATH-500", "gpqa": "Idavidrein/gpqa"}
_READERS = {
    ".jsonl": lambda p: pd.read_json(p, lines=True),
    ".json": pd.read_json,
    ".parquet": pd.read_parquet,
    ".csv": pd.read_csv,
}


def read_table(path: str) -> pd.DataFrame:
    """A local benchmark file as a DataFrame, by extension."""
    ext = os.path.splitext(path)[1].lower()
    if ext not in _READERS:
        raise ValueError(f"--local_dataset_path={path!r}: extension {ext!r} is not one of {sorted(_READERS)}")
    if not os.path.isfile(path):
        raise FileNotFoundError(f"--local_dataset_path={path!r} does not exist")
    return _READERS[ext](path)


def _present(value) -> bool:
    """Not None and not pandas' NaN (what a jsonl row without the key reads as)."""
    return value is not None and not (isinstance(value, float) and value != value)


def _column(row: dict, names: tuple[str, ...], path: str):
    for name in names:
        if _present(row.get(name)):
            return row[name]
    raise KeyError(f"{path}: a row has none of the columns {list(names)}; columns: {sorted(row)}")


def math_row(row: dict, path: str) -> tuple[str, str]:
    """(prompt text, ground truth) of a math problem."""
    problem = _column(row, ("problem", "question", "Problem", "Question"), path)
    if _present(row.get("answer")):
        answer = str(row["answer"]).strip()
    else:
        from verl.utils.reward_score.math import last_boxed_only_string, remove_boxed

        boxed = last_boxed_only_string(str(_column(row, ("solution",), path)))
        if boxed is None:
            raise ValueError(f"{path}: a row has no 'answer' and its 'solution' has no \\boxed{{}} answer")
        answer = remove_boxed(boxed)
    return f"{problem}\n{MATH_INSTRUCTION}", answer


def gpqa_row(row: dict, path: str, seed: int) -> tuple[str, str]:
    """(prompt text, correct letter) of a GPQA question with its options shuffled by ``seed``."""
    correct = str(_column(row, ("Correct Answer",), path)).strip()
    options = [correct] + [str(_column(row, (f"Incorrect Answer {i}",), path)).strip() for i in (1, 2, 3)]
    order = list(range(4))
    random.Random(seed).shuffle(order)
    letters = dict(zip("ABCD", (options[i] for i in order), strict=True))
    prompt = GPQA_TEMPLATE.format(question=str(_column(row, ("Question",), path)).strip(), **letters)
    return prompt, "ABCD"[order.index(0)]


def build_rows(path: str, task: str, data_source: str) -> list[dict]:
    """verl RL rows (``data_source``, chat ``prompt``, ``ability``, ``reward_model``, ``extra_info``) of one file."""
    rows = []
    for index, record in enumerate(read_table(path).to_dict(orient="records")):
        if task == "math":
            prompt, answer = math_row(record, path)
        elif task == "gpqa":
            prompt, answer = gpqa_row(record, path, seed=index)
        else:
            raise ValueError(f"--tasks: {task!r} is not one of ['math', 'gpqa']")
        rows.append(
            {
                "data_source": data_source,
                "prompt": [{"role": "user", "content": prompt}],
                "ability": task,
                "reward_model": {"style": "rule", "ground_truth": answer},
                "extra_info": {"split": "test", "index": index, "source_file": os.path.basename(path)},
            }
        )
    return rows


def parse_args(argv=None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--local_dataset_path", nargs="+", required=True, help="local benchmark files")
    parser.add_argument("--tasks", nargs="+", default=["math"], help="math or gpqa, one per file (or one for all)")
    parser.add_argument("--data_sources", nargs="+", default=None, help="data source per file (default per task)")
    parser.add_argument("--local_dir", default="~/data/r1", help="where test.parquet is written")
    args = parser.parse_args(argv)
    n = len(args.local_dataset_path)
    if len(args.tasks) == 1:
        args.tasks = args.tasks * n
    if args.data_sources is None:
        args.data_sources = [DEFAULT_SOURCES.get(task, task) for task in args.tasks]
    if len(args.tasks) != n or len(args.data_sources) != n:
        parser.error(f"--tasks and --data_sources need one entry per --local_dataset_path file ({n})")
    return args


def main(argv=None) -> str:
    """Write ``{local_dir}/test.parquet``; returns its path."""
    args = parse_args(argv)
    rows = []
    for path, task, source in zip(args.local_dataset_path, args.tasks, args.data_sources, strict=True):
        rows.extend(build_rows(os.path.expanduser(path), task, source))
    local_dir = os.path.expanduser(args.local_dir)
    os.makedirs(local_dir, exist_ok=True)
    output = os.path.join(local_dir, "test.parquet")
    pd.DataFrame(rows).to_parquet(output)
    print(f"wrote {len(rows)} rows to {output}")
    return output


if __name__ == "__main__":
    main()
