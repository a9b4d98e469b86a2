"""Hand examples for the GSM8K and MATH rule rewards and default_compute_score routing."""

import pytest

from verl.utils.reward_score import default_compute_score, gsm8k, math


@pytest.mark.parametrize(
    "text, strict, flexible",
    [
        ("so 3+4 = 7\n#### 7", "7", "7"),
        ("#### 1,234 dollars", "1234", "1,234"),
        ("#### $5 then #### -12", "-12", "-12"),
        ("the answer is 42.", None, "42."),
        ("no digits here .", None, None),
    ],
)
def test_gsm8k_extract(text, strict, flexible):
    assert gsm8k.extract_solution(text, "strict") == strict
    assert gsm8k.extract_solution(text, "flexible") == flexible


def test_gsm8k_scores():
    assert gsm8k.compute_score("work... #### 18", "18") == 1.0
    assert gsm8k.compute_score("work... #### 17", "18") == 0.0
    assert gsm8k.compute_score("work... #### 17", "18", format_score=0.1) == 0.1
    assert gsm8k.compute_score("no marker 18", "18") == 0
    assert gsm8k.compute_score("the answer is 18", "18", method="flexible") == 1.0
    # only the tail is searched
    assert gsm8k.compute_score("#### 18" + " " * 400, "18") == 0
    with pytest.raises(ValueError, match="method='loose'"):
        gsm8k.extract_solution("x", "loose")


@pytest.mark.parametrize(
    "raw, expected",
    [
        ("\\frac12", "\\frac{1}{2}"),
        ("\\dfrac{3}{4}", "\\frac{3}{4}"),
        ("0.5", "\\frac{1}{2}"),
        ("3/4", "\\frac{3}{4}"),
        ("x = 5", "5"),
        ("\\sqrt3", "\\sqrt{3}"),
        ("10\\%", "10"),
        ("90^\\circ", "90"),
        ("\\left( 1, 2 \\right)", "(1,2)"),
        ("5 \\text{ cm}", "5"),
        (".5", "\\frac{1}{2}"),
    ],
)
def test_math_strip_string(raw, expected):
    assert math.strip_string(raw) == expected


def test_math_boxed_helpers():
    s = "so \\boxed{\\frac{1}{2}} and finally \\boxed{x^{2}+1}."
    assert math.last_boxed_only_string(s) == "\\boxed{x^{2}+1}"
    assert math.remove_boxed("\\boxed{x^{2}+1}") == "x^{2}+1"
    assert math.last_boxed_only_string("answer: \\boxed 7$ done") == "\\boxed 7"
    assert math.remove_boxed("\\boxed 7") == "7"
    assert math.last_boxed_only_string("\\fbox{3}") == "\\fbox{3}"
    assert math.last_boxed_only_string("\\boxed{unclosed") is None
    assert math.last_boxed_only_string("nothing") is None


def test_math_compute_score():
    assert math.compute_score("Thus \\boxed{\\dfrac{1}{2}}", "\\frac12") == 1.0
    assert math.compute_score("Thus \\boxed{0.5}", "\\frac{1}{2}") == 1.0
    assert math.compute_score("Thus \\boxed{3}", "4") == 0.0
    assert math.compute_score("no box 4", "4") == 0.0
    assert math.compute_score("\\fbox{4}", "4") == 0.0  # remove_boxed only accepts \boxed: scored 0, no crash
    assert math.is_equiv(None, None) and not math.is_equiv("1", None)


def test_default_compute_score_routing():
    assert default_compute_score("openai/gsm8k", "#### 72", "72") == 1.0
    assert default_compute_score("lighteval/MATH", "\\boxed{2}", "2") == 1.0
    assert default_compute_score("DigitalLearningGmbH/MATH-lighteval", "\\boxed{2}", "3") == 0.0
    dapo = default_compute_score("math_dapo", "Answer: 12", "12")
    assert dapo == {"score": 1.0, "acc": True, "pred": "12"}
    assert default_compute_score("aime2024", "Answer: 11", "12")["score"] == -1.0
    assert default_compute_score("searchR1_nq", "<answer>The Paris</answer>", {"target": ["paris"]}) == 1.0
    with pytest.raises(NotImplementedError, match="data_source='unknown/ds'"):
        default_compute_score("unknown/ds", "x", "y")
