"""prime_math grading, local prime_code execution, and the sandbox scorer's clear error."""

import json

import pytest

from verl.utils.reward_score import default_compute_score, prime_code, prime_math
from verl.utils.reward_score.prime_code.testing_util import run_test

ADD = "```python\na, b = map(int, input().split())\nprint(a + b)\n```"


@pytest.mark.parametrize(
    "output, truth, correct",
    [
        ("so \\boxed{\\frac{1}{2}}", "0.5", True),
        ("The final answer is 50%", "0.5", True),
        ("\\boxed{2\\pi}", "6.28318", True),
        ("\\boxed{x**2+2*x+1}", "(x+1)**2", True),
        ("\\boxed{3}", "4", False),
    ],
)
def test_prime_math(output, truth, correct):
    is_correct, format_ok, _ = prime_math.compute_score(output, truth)
    assert is_correct is correct and format_ok


def test_prime_math_no_answer_and_routing():
    assert prime_math.compute_score("no answer here", "1") == (False, False, None)
    assert default_compute_score("numina_cn_k12", "\\boxed{12}", "12") == 1.0


def test_prime_code_stdin_cases():
    tests = json.dumps({"inputs": ["1 2\n", "3 4\n", "5 5\n"], "outputs": ["3\n", "7\n", "11\n"]})
    passed, meta = prime_code.compute_score(ADD, tests)
    assert passed is False and [m["status"] for m in meta] == ["success", "success", "wrong_answer"]
    assert prime_code.compute_score(ADD, tests, continuous=True)[0] == pytest.approx(2 / 3)
    assert default_compute_score("apps", ADD, tests) == pytest.approx(2 / 3)
    all_good = json.dumps({"inputs": ["1 1\n"], "outputs": ["2\n"]})
    assert prime_code.compute_score(ADD, all_good)[0] is True


def test_prime_code_call_based_runtime_error_and_timeout():
    code = "def f(x):\n    return 10 // x\n"
    results, meta = run_test({"inputs": [[2], [0]], "outputs": [5, 0], "fn_name": "f"}, code, timeout=5)
    assert results == [True, -1] and meta[1]["status"] == "runtime_error"
    results, _ = run_test({"inputs": [""], "outputs": [""]}, "while True:\n    pass\n", timeout=0.5)
    assert results == [-1]
    assert prime_code.compute_score(ADD, "not json")[0] is False
