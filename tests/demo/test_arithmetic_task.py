"""The built-in arithmetic task: deterministic generator, verl's RL schema, the noisy SFT corpus, the scorer."""

import pandas as pd
import pytest

from verl.demo import arithmetic_task as gen
from verl.utils.reward_score import default_compute_score
from verl.utils.reward_score.arithmetic import compute_score


@pytest.fixture(scope="module")
def dataset(tmp_path_factory):
    root = tmp_path_factory.mktemp("arith")
    paths = gen.write_dataset(str(root), num_test=50, num_rl_train=300)
    return {name: pd.read_parquet(path) for name, path in paths.items()}


def test_same_seed_same_rows_other_seed_other_rows(tmp_path):
    a = gen.write_dataset(str(tmp_path / "a"), num_test=20, num_rl_train=40)
    b = gen.write_dataset(str(tmp_path / "b"), num_test=20, num_rl_train=40)
    c = gen.write_dataset(str(tmp_path / "c"), seed=1, num_test=20, num_rl_train=40)
    for name in a:
        pd.testing.assert_frame_equal(pd.read_parquet(a[name]), pd.read_parquet(b[name]))
    assert not pd.read_parquet(a["test"])["extra_info"].equals(pd.read_parquet(c["test"])["extra_info"])


def test_rl_schema_and_ground_truth(dataset):
    train, test = dataset["train"], dataset["test"]
    assert len(train) == 300 and len(test) == 50
    assert list(train.columns) == ["data_source", "prompt", "ability", "reward_model", "extra_info"]
    for frame, split in ((train, "train"), (test, "test")):
        for i, row in enumerate(frame.itertuples()):
            assert row.data_source == "verl/arithmetic"
            (message,) = list(row.prompt)
            assert message["role"] == "user"
            a, b = message["content"].rstrip("=").split("+")
            assert row.reward_model == {"style": "rule", "ground_truth": str(int(a) + int(b))}
            assert row.extra_info["split"] == split and row.extra_info["index"] == i


def test_test_problems_are_held_out_of_both_training_sets(dataset):
    test = {p[0]["content"] for p in dataset["test"]["prompt"]}
    rl_train = {p[0]["content"] for p in dataset["train"]["prompt"]}
    sft_train = set(dataset["sft_train"]["prompt"])
    assert len(test) == 50 and not test & rl_train and not test & sft_train
    # every other pair 0..99 x 0..99 is in the SFT set, each once
    assert len(sft_train) == len(dataset["sft_train"]) == 100 * 100 - 50


def test_sft_corpus_has_exactly_the_documented_share_of_off_by_one_answers(dataset):
    sft = dataset["sft_train"]
    a_plus_b = sft["prompt"].map(lambda p: sum(int(x) for x in p.rstrip("=").split("+")))
    error = sft["response"].astype(int) - a_plus_b
    assert set(error) == {0, 1}
    assert (error == 1).sum() == round(0.6 * len(sft))
    assert ((error == 1) == sft["noisy"]).all()


def test_bad_generator_arguments_name_the_argument(tmp_path):
    with pytest.raises(ValueError, match="num_test"):
        gen.build_splits(num_test=0)
    with pytest.raises(ValueError, match="noise"):
        gen.sft_rows([(1, 2)], noise=1.5, seed=0)
    with pytest.raises(ValueError, match="num_rl_train"):
        gen.write_dataset(str(tmp_path), num_rl_train=10**6)


@pytest.mark.parametrize(
    "response, score",
    [("82", 1.0), (" 82\n", 1.0), ("8 2", 1.0), ("83", 0.0), ("82 83", 0.0), ("", 0.0), ("82!", 0.0), ("-82", 0.0)],
)
def test_exact_match_scorer(response, score):
    assert compute_score(response, "82") == score
    assert default_compute_score("verl/arithmetic", response, "82") == score


def test_format_score_goes_to_wrong_integers_only():
    assert compute_score("83", "82", format_score=0.1) == 0.1
    assert compute_score("-3", "82", format_score=0.1) == 0.1
    assert compute_score("eighty-two", "82", format_score=0.1) == 0.0
    assert compute_score("82", 82) == 1.0


def test_shipped_task_files_match_the_generator(tmp_path):
    from verl.demo.assets import resolve_builtin_path

    fresh = gen.write_dataset(str(tmp_path))
    for name in ("train", "test"):
        shipped = pd.read_parquet(resolve_builtin_path(f"builtin://arithmetic/{name}.parquet"))
        pd.testing.assert_frame_equal(shipped, pd.read_parquet(fresh[name]))
