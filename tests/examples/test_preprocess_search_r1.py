"""examples/data_preprocess/preprocess_search_r1_dataset.py on small local files (no hub access)."""

import importlib
import json
import os
import sys

import pandas as pd
import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, os.path.join(ROOT, "examples", "data_preprocess"))

# FlashRAG / Search-R1 raw rows: id, question, golden_answers
NQ_ROWS = [
    {
        "id": "train_0",
        "question": "who wrote the play hamlet",
        "golden_answers": ["William Shakespeare", "Shakespeare"],
    },
    {"id": "train_1", "question": "What is the capital of France?", "golden_answers": ["Paris"]},
]


def _preprocess():
    return importlib.import_module("preprocess_search_r1_dataset")


def test_jsonl_rows_become_search_r1_rows(tmp_path):
    from verl.multi_turn.tools.base_tool import initialize_tools_from_config
    from verl.utils.reward_score import default_compute_score

    for split in ("train", "test"):
        with open(tmp_path / f"{split}.jsonl", "w") as f:
            f.writelines(json.dumps(row) + "\n" for row in NQ_ROWS)
    out = tmp_path / "out"
    _preprocess().main(["--local_dataset_path", str(tmp_path / "{split}.jsonl"), "--local_dir", str(out)])
    assert sorted(os.listdir(out)) == ["test.parquet", "train.parquet"]
    df = pd.read_parquet(out / "train.parquet")
    assert set(df.columns) == {"data_source", "prompt", "ability", "reward_model", "extra_info"}
    assert list(df["data_source"]) == ["searchR1_nq", "searchR1_nq"]
    system, user = df.iloc[0]["prompt"]
    assert system["role"] == "system" and user["role"] == "user"
    assert user["content"].endswith("\nQuestion: who wrote the play hamlet?")  # a question mark is added
    for tag in ("<think>", "<search>", "<answer>", "</answer>"):
        assert tag in user["content"]
    assert df.iloc[1]["prompt"][1]["content"].endswith("Question: What is the capital of France?")
    reward_model = df.iloc[0]["reward_model"]
    assert reward_model["style"] == "rule"
    assert list(reward_model["ground_truth"]["target"]) == ["William Shakespeare", "Shakespeare"]
    extra = df.iloc[1]["extra_info"]
    assert (extra["split"], extra["index"], extra["question"], extra["need_tools_kwargs"]) == (
        "train",
        1,
        "What is the capital of France?",
        True,
    )
    assert list(extra["tools_kwargs"]["search"]["create_kwargs"]["ground_truth"]["target"]) == ["Paris"]
    assert pd.read_parquet(out / "test.parquet").iloc[0]["extra_info"]["split"] == "test"
    # the row offers exactly the tool that the example tool config defines
    example = os.path.join(ROOT, "examples", "multiturn", "config", "tool_config", "search_tool_config.yaml")
    assert [t.name for t in initialize_tools_from_config(example)] == list(extra["tools_kwargs"])
    # and verl's router scores it by exact match against the golden answers, as read back from parquet
    ground_truth = df.iloc[0]["reward_model"]["ground_truth"]
    assert default_compute_score("searchR1_nq", "<answer> shakespeare </answer>", ground_truth) == 1.0
    assert default_compute_score("searchR1_nq", "<answer> Marlowe </answer>", ground_truth) == 0.0


def test_parquet_rows_keep_their_own_data_source(tmp_path):
    # Search-R1's merged files already carry data_source and older prompt/reward columns, which are replaced
    raw = tmp_path / "raw"
    os.makedirs(raw)
    rows = [
        {**NQ_ROWS[0], "data_source": "hotpotqa", "reward_model": {"style": "rule", "ground_truth": {"x": "1"}}},
        {**NQ_ROWS[1], "data_source": "nq", "reward_model": {"style": "rule", "ground_truth": {"x": "2"}}},
    ]
    for split in ("train", "test"):
        pd.DataFrame(rows).to_parquet(raw / f"{split}-00000-of-00001.parquet")
    out = tmp_path / "out"
    _preprocess().main(["--local_dataset_path", str(raw), "--local_dir", str(out), "--data_source_name", "popqa"])
    df = pd.read_parquet(out / "test.parquet")
    assert list(df["data_source"]) == ["searchR1_hotpotqa", "searchR1_nq"]
    assert [list(r["ground_truth"]["target"]) for r in df["reward_model"]] == [
        ["William Shakespeare", "Shakespeare"],
        ["Paris"],
    ]


def test_data_source_name_and_answer_shapes(tmp_path):
    preprocess = _preprocess()
    row = preprocess.make_map_fn("train", "hotpotqa")({"question": "q", "golden_answers": "one"}, 0)
    assert row["data_source"] == "searchR1_hotpotqa" and row["reward_model"]["ground_truth"] == {"target": ["one"]}
    row = preprocess.make_map_fn("train", "searchR1_musique")({"question": "q?", "golden_answers": ["a"]}, 3)
    assert row["data_source"] == "searchR1_musique" and row["extra_info"]["index"] == 3  # no double prefix
    with pytest.raises(ValueError, match="golden_answers: expected at least one answer"):
        preprocess.golden_answer_list([])
