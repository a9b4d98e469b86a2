"""Turn GSM8K into verl's RL parquet schema (``train.parquet`` / ``test.parquet``).

    python examples/data_preprocess/gsm8k.py --local_dir ~/data/gsm8k
    python examples/data_preprocess/gsm8k.py --local_dataset_path /data/gsm8k      # offline: a local copy

By default the data comes from the Hugging Face hub (``openai/gsm8k``, config ``main``). ``--local_dataset_path``
(alias ``--local_path``) reads a local copy instead: a directory holding ``train``/``test`` files (parquet, jsonl or
json, e.g. the hub layout ``main/train-00000-of-00001.parquet``), a ``datasets.save_to_disk`` directory, or a path
pattern containing ``{split}`` such as ``/data/gsm8k/{split}.jsonl``.
"""

from __future__ import annotations

import argparse
import glob
import os
import re

DATA_SOURCE = "openai/gsm8k"
INSTRUCTION = 'Let\'s think step by step and output the final answer after "####".'
_EXTENSIONS = {"parquet": "parquet", "jsonl": "json", "json": "json"}


def extract_solution(answer: str) -> str:
    """The number after ``#### `` in a GSM8K answer, thousands separators removed ("1,234" -> "1234")."""
    match = re.search(r"#### (-?[0-9.,]+)", answer)
    if match is None:
        raise ValueError(f"GSM8K answer has no '#### <number>' line: {answer[-80:]!r}")
    return match.group(1).replace(",", "")


def _find_split_files(root: str, split: str, ext: str) -> list[str]:
    """``{split}*.{ext}`` files under ``root``, from the shallowest folder that has any (a hub snapshot of GSM8K
    holds ``main/`` and ``socratic/``; ``main`` wins alphabetically)."""
    paths = glob.glob(os.path.join(root, "**", f"{split}*.{ext}"), recursive=True)
    if not paths:
        return []
    folder = min((os.path.dirname(p) for p in paths), key=lambda d: (d.count(os.sep), d))
    return sorted(p for p in paths if os.path.dirname(p) == folder)


def load_splits(hub_name: str, hub_config: str | None, local_path: str | None, splits=("train", "test")):
    """A ``DatasetDict`` with ``splits``, from the hub or from a local copy (see the module docstring)."""
    import datasets

    if local_path is None:
        return datasets.load_dataset(hub_name, hub_config)
    local_path = os.path.expanduser(local_path)
    if "{split}" in local_path:
        files = {split: local_path.format(split=split) for split in splits}
        ext = local_path.rsplit(".", 1)[-1]
    elif os.path.isfile(os.path.join(local_path, "dataset_dict.json")):
        return datasets.load_from_disk(local_path)
    elif os.path.isdir(local_path):
        files, ext = {}, None
        for candidate in _EXTENSIONS:
            found = {s: _find_split_files(local_path, s, candidate) for s in splits}
            if all(found.values()):
                files, ext = found, candidate
                break
        if not files:
            raise FileNotFoundError(
                f"--local_dataset_path={local_path!r}: no {'/'.join(splits)} files with extension "
                f"{'/'.join(_EXTENSIONS)} found under it"
            )
    else:
        raise FileNotFoundError(f"--local_dataset_path={local_path!r} is neither a directory nor a '{{split}}' pattern")
    if ext not in _EXTENSIONS:
        raise ValueError(f"--local_dataset_path={local_path!r}: extension {ext!r} is not one of {list(_EXTENSIONS)}")
    for split, paths in files.items():
        for path in [paths] if isinstance(paths, str) else paths:
            if not os.path.exists(path):
                raise FileNotFoundError(f"--local_dataset_path: the {split} file {path!r} does not exist")
    return datasets.load_dataset(_EXTENSIONS[ext], data_files=files)


def make_map_fn(split: str):
    """Row converter for ``datasets.map(..., with_indices=True)``: GSM8K fields -> verl's RL schema."""

    def process(example: dict, idx: int) -> dict:
        question_raw = example["question"]
        answer_raw = example["answer"]
        return {
            "data_source": DATA_SOURCE,
            "prompt": [{"role": "user", "content": question_raw + " " + INSTRUCTION}],
            "ability": "math",
            "reward_model": {"style": "rule", "ground_truth": extract_solution(answer_raw)},
            "extra_info": {"split": split, "index": idx, "answer": answer_raw, "question": question_raw},
        }

    return process


def write_splits(dataset, local_dir: str, hdfs_dir: str | None, map_fn_factory) -> None:
    """Map the ``train``/``test`` splits and write ``{split}.parquet`` into ``local_dir`` (then copy to HDFS)."""
    local_dir = os.path.expanduser(local_dir)
    os.makedirs(local_dir, exist_ok=True)
    for split in ("train", "test"):
        part = dataset[split]
        part = part.map(function=map_fn_factory(split), with_indices=True, remove_columns=part.column_names)
        part.to_parquet(os.path.join(local_dir, f"{split}.parquet"))
    if hdfs_dir is not None:
        from verl.utils import hdfs_io

        hdfs_io.makedirs(hdfs_dir, exist_ok=True)
        hdfs_io.copy(src=local_dir, dst=hdfs_dir)


def parse_args(default_dir: str, argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--local_dir", default=default_dir, help="where train.parquet / test.parquet are written")
    parser.add_argument("--hdfs_dir", default=None, help="optional HDFS directory to copy the output to")
    parser.add_argument(
        "--local_dataset_path",
        "--local_path",
        dest="local_dataset_path",
        default=None,
        help="read a local copy of the raw dataset instead of the hub",
    )
    return parser.parse_args(argv)


def main(argv=None) -> None:
    args = parse_args("~/data/gsm8k", argv)
    dataset = load_splits(DATA_SOURCE, "main", args.local_dataset_path)
    write_splits(dataset, args.local_dir, args.hdfs_dir, make_map_fn)


if __name__ == "__main__":
    main()
