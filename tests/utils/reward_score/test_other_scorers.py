"""Hand examples for math_dapo, search_r1_like_qa_em, geo3k format, math_batch and math_verify's import error."""

import builtins

import pytest

from verl.utils.reward_score import geo3k, math_batch, math_dapo, search_r1_like_qa_em


def test_math_dapo_minerva():
    assert math_dapo.normalize_final_answer("\\text{5 dollars}") == "5"
    assert math_dapo.normalize_final_answer("1,000") == "1000"
    assert math_dapo.normalize_final_answer("x = \\frac{1}{2}") == "\\frac{1}{2}"
    out = math_dapo.compute_score("reasoning...\nAnswer: $1,000$", "1000")
    assert out == {"score": 1.0, "acc": True, "pred": "1000"}
    wrong = math_dapo.compute_score("Answer: 7\nmore text\nanswer: 8", "7")  # the last Answer: counts
    assert wrong == {"score": -1.0, "acc": False, "pred": "8"}
    assert math_dapo.compute_score("no answer line", "7")["pred"] == "[INVALID]"
    assert math_dapo.compute_score("... \\boxed{7}", "7", strict_box_verify=True)["acc"] is True


def test_search_r1_em():
    gt = {"target": ["New York City", "NYC"]}
    assert search_r1_like_qa_em.compute_score("<answer>new york city.</answer>", gt) == 1.0
    assert search_r1_like_qa_em.compute_score("<answer>Boston</answer>", gt, format_score=0.2) == 0.2
    assert search_r1_like_qa_em.compute_score("no tags NYC", gt) == 0
    spam = "<answer>x</answer>" * 11 + "<answer>NYC</answer>"
    assert search_r1_like_qa_em.compute_score(spam, gt) == 0.25
    assert search_r1_like_qa_em.compute_score_subem("<answer>I think NYC</answer>", gt) == 1.0


def test_geo3k_format():
    assert geo3k.format_reward("<think>a</think> so \\boxed{3}") == 1.0
    assert geo3k.format_reward("\\boxed{3}") == 0.0


def test_geo3k_is_routed_by_data_source_and_graded():
    from verl.utils.reward_score import default_compute_score

    source = "hiyouga/geometry3k"  # the data_source examples/data_preprocess/geo3k.py writes
    assert default_compute_score(source, "<think>8+6</think> so \\boxed{14}", "14") == 1.0
    assert default_compute_score(source, "so \\boxed{14}", "14") == pytest.approx(0.9)  # right, no <think>
    assert default_compute_score(source, "<think>hm</think> \\boxed{15}", "14") == pytest.approx(0.1)
    # graded, not compared as strings
    assert default_compute_score(source, "\\boxed{\\frac{1}{2}}", "0.5") == pytest.approx(0.9)


def test_math_verify_import_error_names_package(monkeypatch):
    from verl.utils.reward_score import math_verify

    real_import = builtins.__import__

    def no_math_verify(name, *args, **kwargs):
        if name.startswith("math_verify") and name != "verl.utils.reward_score.math_verify":
            raise ImportError("absent")
        return real_import(name, *args, **kwargs)

    monkeypatch.setattr(builtins, "__import__", no_math_verify)
    with pytest.raises(ImportError, match="pip install math-verify"):
        math_verify.compute_score("\\boxed{1}", "1")


def test_math_batch():
    assert math_batch.compute_score_batched(["a", "b"], ["\\boxed{1}", "\\boxed{2}"], ["1", "3"], [None, None]) == [
        1.0,
        0.0,
    ]
