"""recipe/r1: the eval parquet from local benchmark files, the per-data-source scoring, and main_eval's pass@k
with that scoring on hand-written responses."""

import json
import os

import pandas as pd
import pytest
from hydra import compose, initialize_config_dir

from recipe.r1 import data_process, reward_score
from verl.trainer.main_eval import evaluate

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
REWARD_PATH = os.path.join(ROOT, "recipe", "r1", "reward_score.py")

GPQA = [
    {
        "Question": "Which is a noble gas?",
        "Correct Answer": "Neon",
        "Incorrect Answer 1": "Sodium",
        "Incorrect Answer 2": "Iron",
        "Incorrect Answer 3": "Carbon",
    },
    {
        "Question": "2 + 2?",
        "Correct Answer": "4",
        "Incorrect Answer 1": "3",
        "Incorrect Answer 2": "5",
        "Incorrect Answer 3": "22",
    },
]


@pytest.fixture
def eval_parquet(tmp_path):
    math_file = tmp_path / "math500.jsonl"
    with open(math_file, "w") as f:
        f.write(json.dumps({"problem": "What is 1/2 + 1/4?", "answer": "\\frac{3}{4}"}) + "\n")
        f.write(json.dumps({"problem": "Compute 6*7.", "solution": "We get $6\\cdot 7 = \\boxed{42}$."}) + "\n")
    gpqa_file = tmp_path / "gpqa_diamond.csv"
    pd.DataFrame(GPQA).to_csv(gpqa_file, index=False)
    files = [str(math_file), str(gpqa_file)]
    return data_process.main(["--local_dataset_path", *files, "--tasks", "math", "gpqa", "--local_dir", str(tmp_path)])


def test_data_process_builds_the_rl_schema_from_local_files(eval_parquet):
    df = pd.read_parquet(eval_parquet)
    assert df["data_source"].tolist() == ["HuggingFaceH4/MATH-500"] * 2 + ["Idavidrein/gpqa"] * 2
    assert [r["ground_truth"] for r in df["reward_model"]][:2] == ["\\frac{3}{4}", "42"]
    first = df["prompt"][0][0]
    assert first["role"] == "user" and first["content"].startswith("What is 1/2 + 1/4?")
    assert first["content"].endswith(data_process.MATH_INSTRUCTION)
    for i, row in enumerate(GPQA):
        content = df["prompt"][2 + i][0]["content"]
        letter = df["reward_model"][2 + i]["ground_truth"]
        # the ground-truth letter labels the correct answer in the shuffled options
        assert f"\n{letter}) {row['Correct Answer']}" in content
        assert all(row[f"Incorrect Answer {k}"] in content for k in (1, 2, 3))
    # the shuffle is seeded per row: the same files give the same letters
    again = data_process.build_rows(os.path.join(os.path.dirname(eval_parquet), "gpqa_diamond.csv"), "gpqa", "g")
    assert [r["reward_model"]["ground_truth"] for r in again] == df["reward_model"].map(
        lambda r: r["ground_truth"]
    ).tolist()[2:]


def test_data_process_rejects_what_it_cannot_read(tmp_path):
    bad = tmp_path / "data.txt"
    bad.write_text("x")
    with pytest.raises(ValueError, match="extension '.txt'"):
        data_process.main(["--local_dataset_path", str(bad)])
    with pytest.raises(FileNotFoundError, match="does not exist"):
        data_process.main(["--local_dataset_path", str(tmp_path / "missing.jsonl")])
    no_answer = tmp_path / "no_answer.jsonl"
    no_answer.write_text(json.dumps({"problem": "p", "solution": "no box"}) + "\n")
    with pytest.raises(ValueError, match="no \\\\boxed"):
        data_process.main(["--local_dataset_path", str(no_answer)])


@pytest.mark.parametrize(
    ("data_source", "response", "ground_truth", "score"),
    [
        ("HuggingFaceH4/MATH-500", "<think>maybe \\boxed{1}</think> So \\boxed{\\dfrac{3}{4}}.", "\\frac{3}{4}", 1.0),
        ("HuggingFaceH4/MATH-500", "<think>I think \\boxed{42}</think> The answer is \\boxed{41}", "42", 0.0),
        ("opencompass/aime2025", "<think>long thought \\boxed{42} never closed", "42", 0.0),
        ("aime2024", "no thinking block: \\boxed{ 42 }", "42", 1.0),
        ("Idavidrein/gpqa", "<think>A or C?</think>\nAnswer: C", "C", 1.0),
        ("Idavidrein/gpqa", "The answer is (B).", "B", 1.0),
        ("Idavidrein/gpqa", "the answer is a guess: **Answer:** D", "D", 1.0),
        ("Idavidrein/gpqa", "Final: \\boxed{D}", "D", 1.0),
        ("Idavidrein/gpqa", "<think>Answer: C</think> Answer: A", "C", 0.0),
        ("openai/gsm8k", "so #### 12", "12", 1.0),  # anything else: the built-in rules
    ],
)
def test_reward_routes_by_data_source(data_source, response, ground_truth, score):
    assert reward_score.compute_score(data_source, response, ground_truth) == score


def test_main_eval_with_the_r1_reward_reports_pass_at_k_per_benchmark(eval_parquet, tmp_path):
    df = pd.read_parquet(eval_parquet)
    gpqa_letters = [r["ground_truth"] for r in df["reward_model"]][2:]
    wrong = {letter: "A" if letter != "A" else "B" for letter in gpqa_letters}
    df["responses"] = [
        ["<think>x</think>\\boxed{3/4}", "\\boxed{0.75}", "none", "<think>\\boxed{3/4}"],  # 1 of 4 (0.75 != 3/4)
        ["\\boxed{42}", "\\boxed{42}", "\\boxed{42}", "\\boxed{24}"],  # 3 of 4
        [f"Answer: {wrong[gpqa_letters[0]]}"] * 4,  # 0 of 4
        [f"Answer: {gpqa_letters[1]}", "Answer:", "", f"Answer: {wrong[gpqa_letters[1]]}"],  # 1 of 4
    ]
    path = tmp_path / "generated.parquet"
    df.to_parquet(path)
    config_dir = os.path.join(ROOT, "verl", "trainer", "config")
    with initialize_config_dir(config_dir=config_dir, version_base=None):
        config = compose("evaluation", overrides=[f"data.path={path}", f"custom_reward_function.path={REWARD_PATH}"])
    metrics = evaluate(config)
    assert metrics == pytest.approx(
        {
            "test_score/HuggingFaceH4/MATH-500": (1 / 4 + 3 / 4) / 2,
            "pass@1/HuggingFaceH4/MATH-500": (1 / 4 + 3 / 4) / 2,
            "pass@4/HuggingFaceH4/MATH-500": 1.0,
            "test_score/Idavidrein/gpqa": (0 + 1 / 4) / 2,
            "pass@1/Idavidrein/gpqa": (0 + 1 / 4) / 2,
            "pass@4/Idavidrein/gpqa": 0.5,
        }
    )
