"""Generated word problems (seeded, verl's RL schema, answers that follow from the text) and the last-number reward."""

import re

import pandas as pd
import pytest

from verl.demo import word_problems as gen
from verl.utils.reward_score import default_compute_score
from verl.utils.reward_score.word_problems import compute_score, last_number

# each template's answer from the numbers in the order the question writes them, derived by hand from the wording
ANSWER_FROM_TEXT = [
    lambda a, b, c: a + b - c,  # has a, buys b more, gives c away
    lambda a, b, c: a * b - c,  # a trays of b, sells c
    lambda a, b, c: a * b * c,  # a dollars an hour, b hours a week, c weeks
    lambda a, b, c: (a - c) // b,  # a shared among b friends, c kept
    lambda a, b, c, d: a * b + c * d,  # a mph for b hours, then c mph for d hours
    lambda a, b: a - b - 2 * b,  # a pages, b on Monday, twice as many on Tuesday
    lambda a, b, c: a * b + c,  # a packs of b, had c
    lambda a, b, c, d: a * b - c + d,  # a rows of b, c die, d planted
]


def test_answers_follow_from_the_text_and_are_whole_non_negative_numbers():
    assert len(ANSWER_FROM_TEXT) == len(gen.TEMPLATES)
    problems = gen.make_problems(400, seed=3)
    assert len({question for question, _ in problems}) == 400
    for i, (question, answer) in enumerate(problems):
        numbers = [int(x) for x in re.findall(r"\d+", question)]
        assert answer == ANSWER_FROM_TEXT[i % len(gen.TEMPLATES)](*numbers), question
        assert isinstance(answer, int) and answer >= 0


def test_a_share_leaves_exactly_the_kept_remainder():
    for question, answer in gen.make_problems(200, seed=5)[3 :: len(gen.TEMPLATES)]:
        total, friends, kept = (int(x) for x in re.findall(r"\d+", question))
        assert answer * friends + kept == total and kept < friends


def test_same_seed_same_rows_other_seed_other_rows_and_splits_disjoint(tmp_path):
    a = gen.write_dataset(str(tmp_path / "a"), num_train=60, num_test=20)
    b = gen.write_dataset(str(tmp_path / "b"), num_train=60, num_test=20)
    c = gen.write_dataset(str(tmp_path / "c"), seed=1, num_train=60, num_test=20)
    for split in ("train", "test"):
        pd.testing.assert_frame_equal(pd.read_parquet(a[split]), pd.read_parquet(b[split]))
    assert not pd.read_parquet(a["train"])["prompt"].equals(pd.read_parquet(c["train"])["prompt"])
    train, test = pd.read_parquet(a["train"]), pd.read_parquet(a["test"])
    assert len(train) == 60 and len(test) == 20
    train_questions = {info["question"] for info in train["extra_info"]}
    assert not train_questions & {info["question"] for info in test["extra_info"]}


def test_rows_are_verl_rl_schema_with_the_instruction_and_the_answer_as_ground_truth(tmp_path):
    frame = pd.read_parquet(gen.write_dataset(str(tmp_path), num_train=16, num_test=4)["train"])
    assert list(frame.columns) == ["data_source", "prompt", "ability", "reward_model", "extra_info"]
    for i, row in enumerate(frame.itertuples()):
        assert row.data_source == "verl/word_problems"
        (message,) = list(row.prompt)
        assert message["role"] == "user" and message["content"] == f"{row.extra_info['question']} {gen.INSTRUCTION}"
        assert row.reward_model == {"style": "rule", "ground_truth": row.extra_info["answer"]}
        assert row.extra_info["split"] == "train" and row.extra_info["index"] == i


def test_an_empty_split_is_refused():
    with pytest.raises(ValueError, match="num_train=0"):
        gen.write_dataset("/nonexistent", num_train=0)


@pytest.mark.parametrize(
    "response, expected",
    [
        ("She has 59 + 26 = 85, then 85 - 25 = 60. The answer is 60.", 60.0),
        ("Total: $1,932", 1932.0),
        ("#### 17", 17.0),
        ("It ends at -3 degrees", -3.0),
        ("Each gets 2.5 cookies", 2.5),
        ("I cannot tell.", None),
        ("", None),
    ],
)
def test_last_number(response, expected):
    assert last_number(response) == expected


def test_reward_scores_the_final_number_only():
    assert compute_score("12 + 5 = 17. So the answer is 17.", "17") == 1.0
    assert compute_score("The answer is 17.0", "17") == 1.0
    assert compute_score("17 apples at first, 12 left", "17") == 0.0  # an earlier number does not count
    assert compute_score("12", "17", format_score=0.1) == 0.1  # a wrong number gets the format score
    assert compute_score("no idea", "17", format_score=0.1) == 0.0  # no number at all gets nothing
    assert default_compute_score("verl/word_problems", "so 1,700 in all", "1700") == 1.0
    assert default_compute_score("verl/word_problems", "so 1,700 in all", "170") == 0.0
