"""No built-in reward rule runs what a model writes: hostile answers in every answer form, to every rule.

A policy under RL writes whatever earns reward. Each payload below would leave a marker file (or take the process's
CPU or memory) if any rule evaluated it; every call must return a score in bounded time and leave no marker. The
code rule runs model code by design, in the local sandbox: there the payload must not write outside the sandbox.
"""

from __future__ import annotations

import json
import time

import pytest

from verl.utils.reward_score import default_compute_score
from verl.utils.reward_score.safe_expr import parse_math

CODE_PAYLOADS = (
    "__import__('os').system('touch {mark}')",
    "__import__('builtins').open('{mark}', 'w').write('x')",
    "eval(\"open('{mark}', 'w')\")",
    "exec('import os; os.system(\"touch {mark}\")')",
    "(lambda: __import__('pathlib').Path('{mark}').touch())()",
    "[c for c in ().__class__.__base__.__subclasses__()]",
)
BOMBS = ("9**9**9**9", "9^9^9^9", "(10^1000)^1000^1000", "(" * 3000 + "1" + ")" * 3000, "1" * 20000, "x*" * 5000 + "x")
FORMS = (
    "\\boxed{{{}}}",
    "#### {}",
    "<answer>{}</answer>",
    "Answer: {}",
    "The final answer is {}",
    "```python\n{}\n```",
    "<think>ok</think> \\boxed{{{}}}",
)
# data source -> a ground truth that sends a non-numeric answer down the rule's symbolic path where it has one
RULES = {
    "openai/gsm8k": "72",
    "lighteval/MATH": "x^2 - 1",
    "math_dapo": "34",
    "numina_olympiads": "x^2 - 1",
    "verl/arithmetic": "82",
    "searchR1_nq": {"target": ["Paris"]},
    "hiyouga/geometry3k": "x^2 - 1",
}
BOUND_S = 30.0  # per call, on a loaded 2-core box; the symbolic path's own deadline is 5 s


def _responses(mark):
    for payload in CODE_PAYLOADS + BOMBS:
        text = payload.format(mark=mark) if "{mark}" in payload else payload
        for form in FORMS:
            yield form.format(text)


@pytest.mark.parametrize("data_source", sorted(RULES))
def test_no_rule_evaluates_a_hostile_answer(data_source, tmp_path):
    mark = tmp_path / "pwned"
    for response in _responses(mark):
        start = time.monotonic()
        score = default_compute_score(data_source, response, RULES[data_source])
        elapsed = time.monotonic() - start
        value = score["score"] if isinstance(score, dict) else score
        assert isinstance(value, float) and value < 1.0, (data_source, response[:80], score)
        assert elapsed < BOUND_S, (data_source, response[:80], elapsed)
        assert not mark.exists(), f"{data_source} ran model output: {response[:120]!r}"


def test_math_verify_never_evaluates_a_hostile_answer(tmp_path):
    """The math_verify scorer (a reward function users pick by hand) reads answers with math-verify's parsers."""
    pytest.importorskip("math_verify")
    from verl.utils.reward_score import math_verify

    mark = tmp_path / "pwned"
    # every code payload in every answer form; the size bombs only boxed (math-verify's own timeout bounds them)
    code = [form.format(p.format(mark=mark)) for p in CODE_PAYLOADS for form in FORMS]
    for response in code + ["\\boxed{" + bomb + "}" for bomb in BOMBS]:
        start = time.monotonic()
        assert math_verify.compute_score(response, "x^2 - 1") == 0.0, response[:80]
        assert time.monotonic() - start < BOUND_S, response[:80]
        assert not mark.exists(), f"math_verify ran model output: {response[:120]!r}"


def test_the_code_rule_runs_model_code_only_inside_the_sandbox(tmp_path):
    mark = tmp_path / "pwned"
    cases = json.dumps({"inputs": ["1\n"], "outputs": ["1\n"]})
    program = f"import pathlib, os\npathlib.Path({str(mark)!r}).write_text('x')\nos.system('touch {mark}')\nprint(1)"
    score = default_compute_score("codecontests", f"```python\n{program}\n```", cases)
    assert score < 1.0
    assert not mark.exists()


def test_the_math_grammar_builds_expressions_and_refuses_code():
    assert str(parse_math("(x-1)*(x+1)").expand()) == "x**2 - 1"
    assert parse_math("sqrt(8)/2") == parse_math("sqrt(2)")
    assert parse_math("2^-3") == parse_math("1/8")
    for text in CODE_PAYLOADS + BOMBS + ("a.b", "x[0]", "foo(x)", "lambda: 1", "'s'", "1;2", "x if y else z"):
        assert parse_math(text.format(mark="m")) is None, text


def test_numina_rule_still_grades_symbolic_answers():
    assert default_compute_score("numina_olympiads", "so \\boxed{(x-1)*(x+1)}", "x^2-1") == 1.0
    assert default_compute_score("numina_olympiads", "so \\boxed{(x-1)*(x+2)}", "x^2-1") == 0.0


def test_latex_answers_parse_through_the_grammar():
    from verl.utils.reward_score.safe_expr import latex_to_plain

    assert parse_math(latex_to_plain("2\\sqrt{3}")) == parse_math("sqrt(12)")
    assert parse_math(latex_to_plain("\\dfrac{\\sqrt{3}}{2}")) == parse_math("sqrt(3)/2")
    assert parse_math(latex_to_plain("x^{2}")) == parse_math("x**2")


def test_geo3k_grades_equal_forms_without_mathruler():
    from verl.utils.reward_score import geo3k

    assert geo3k.acc_reward("so \\boxed{\\sqrt{12}}", "2\\sqrt{3}") == 1.0
    assert geo3k.acc_reward("so \\boxed{40/3}", "\\frac{40}{3}") == 1.0
    assert geo3k.acc_reward("so \\boxed{24}", "0.24") == 0.0  # no percent leniency for geometry
    assert geo3k.acc_reward("no box", "24") == 0.0
