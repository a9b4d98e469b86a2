"""examples/data_preprocess: gsm8k, math_dataset and gsm8k_multiturn_sft on small local fixtures (no hub access)."""

import importlib
import json
import os
import sys

import pandas as pd
import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, os.path.join(ROOT, "examples", "data_preprocess"))

GSM8K_ROWS = [
    {"question": "Tom has 3 apples and buys 4. How many?", "answer": "3 + 4 = <<3+4=7>>7\n#### 7"},
    {"question": "A car costs 1,200 dollars twice. Total?", "answer": "2 * 1,200 = 2,400\n#### 2,400"},
    {"question": "Debt of 5 minus 8?", "answer": "5 - 8 = -3\n#### -3"},
]
MATH_ROWS = [
    {"problem": "What is $1/2 + 0$?", "solution": "It is $\\boxed{\\frac{1}{2}}$.", "level": "Level 1"},
    {"problem": "Compute $2^3$.", "solution": "First $\\boxed{4}$? No: $2^3 = \\boxed{8}$.", "level": "Level 1"},
]


def _module(name):
    return importlib.import_module(name)


@pytest.fixture()
def gsm8k_hub_copy(tmp_path):
    """The hub layout: main/{split}-00000-of-00001.parquet, plus a socratic/ folder that must be ignored."""
    for config, rows in (("main", GSM8K_ROWS), ("socratic", GSM8K_ROWS[:1])):
        os.makedirs(tmp_path / "raw" / config)
        for split in ("train", "test"):
            pd.DataFrame(rows).to_parquet(tmp_path / "raw" / config / f"{split}-00000-of-00001.parquet")
    return str(tmp_path / "raw")


def test_gsm8k_from_local_hub_copy(gsm8k_hub_copy, tmp_path):
    from verl.utils.reward_score import default_compute_score

    out = tmp_path / "out"
    _module("gsm8k").main(["--local_dataset_path", gsm8k_hub_copy, "--local_dir", str(out)])
    assert sorted(os.listdir(out)) == ["test.parquet", "train.parquet"]
    df = pd.read_parquet(out / "train.parquet")
    assert len(df) == 3  # socratic/ was not mixed in
    assert set(df.columns) == {"data_source", "prompt", "ability", "reward_model", "extra_info"}
    row = df.iloc[1]
    assert row["data_source"] == "openai/gsm8k" and row["ability"] == "math"
    assert list(row["prompt"]) == [
        {
            "role": "user",
            "content": GSM8K_ROWS[1]["question"]
            + ' Let\'s think step by step and output the final answer after "####".',
        }
    ]
    assert row["reward_model"] == {"style": "rule", "ground_truth": "2400"}
    assert row["extra_info"] == {
        "split": "train",
        "index": 1,
        "answer": GSM8K_ROWS[1]["answer"],
        "question": GSM8K_ROWS[1]["question"],
    }
    assert [r["ground_truth"] for r in df["reward_model"]] == ["7", "2400", "-3"]
    assert pd.read_parquet(out / "test.parquet").iloc[0]["extra_info"]["split"] == "test"
    # the produced rows score with verl's router
    assert default_compute_score("openai/gsm8k", "so #### 2400", row["reward_model"]["ground_truth"]) == 1.0


def test_gsm8k_split_pattern_and_errors(tmp_path):
    for split in ("train", "test"):
        with open(tmp_path / f"{split}.jsonl", "w") as f:
            for r in GSM8K_ROWS[:2]:
                f.write(json.dumps(r) + "\n")
    gsm8k = _module("gsm8k")
    gsm8k.main(["--local_path", str(tmp_path / "{split}.jsonl"), "--local_dir", str(tmp_path / "out")])
    assert len(pd.read_parquet(tmp_path / "out" / "test.parquet")) == 2
    with pytest.raises(FileNotFoundError, match="local_dataset_path"):
        gsm8k.main(["--local_dataset_path", str(tmp_path / "nowhere"), "--local_dir", str(tmp_path / "x")])
    with pytest.raises(ValueError, match="####"):
        gsm8k.extract_solution("no final line")


def test_math_dataset_from_local_jsonl(tmp_path):
    raw = tmp_path / "raw"
    os.makedirs(raw)
    for split in ("train", "test"):
        with open(raw / f"{split}.jsonl", "w") as f:
            for r in MATH_ROWS:
                f.write(json.dumps(r) + "\n")
    out = tmp_path / "out"
    _module("math_dataset").main(["--local_dataset_path", str(raw), "--local_dir", str(out)])
    df = pd.read_parquet(out / "test.parquet")
    assert df.iloc[0]["data_source"] == "DigitalLearningGmbH/MATH-lighteval"
    assert df.iloc[0]["prompt"][0]["content"] == (
        "What is $1/2 + 0$? Let's think step by step and output the final answer within \\boxed{}."
    )
    assert [r["ground_truth"] for r in df["reward_model"]] == ["\\frac{1}{2}", "8"]  # the last box wins
    assert df.iloc[1]["extra_info"] == {"split": "test", "index": 1}


def test_gsm8k_multiturn_sft_feeds_the_multiturn_dataset(gsm8k_hub_copy, tmp_path):
    from transformers import AutoTokenizer

    from verl.demo.tiny_model import shipped_tokenizer_path
    from verl.utils.dataset import MultiTurnSFTDataset

    out = tmp_path / "sft"
    _module("gsm8k_multiturn_sft").main(["--local_dataset_path", gsm8k_hub_copy, "--local_dir", str(out)])
    tokenizer = AutoTokenizer.from_pretrained(shipped_tokenizer_path())
    ds = MultiTurnSFTDataset(str(out / "train.parquet"), tokenizer, {"max_length": 256})
    item = ds[0]
    trained = tokenizer.decode(item["input_ids"][item["loss_mask"].bool()])
    assert GSM8K_ROWS[0]["answer"] in trained and GSM8K_ROWS[0]["question"] not in trained


def test_geo3k_from_local_hub_copy_keeps_images_and_routes_to_the_geo3k_scorer(tmp_path):
    from verl.demo.tiny_vlm import write_tiny_geometry3k
    from verl.utils.dataset.vision_utils import process_image

    raw = write_tiny_geometry3k(str(tmp_path / "raw"), num_train=3, num_test=2)
    out = tmp_path / "out"
    _module("geo3k").main(["--local_dataset_path", raw, "--local_dir", str(out)])
    train = pd.read_parquet(out / "train.parquet")
    assert len(train) == 3 and len(pd.read_parquet(out / "test.parquet")) == 2
    row = train.iloc[1]
    assert row["data_source"] == "hiyouga/geometry3k" and row["ability"] == "math"
    content = row["prompt"][0]["content"]
    assert content.startswith("<image>Find x") and "<think>" in content and "\\boxed{}" in content
    assert row["reward_model"]["ground_truth"] == row["extra_info"]["answer"]
    assert row["extra_info"]["split"] == "train" and row["extra_info"]["index"] == 1
    assert len(row["images"]) == 1 and process_image(row["images"][0]).size[0] >= 24
