"""The calc_tool agentic recipe: its seeded generator, the calculator's parser and tool, the reward function, and
the SFT corpus rendered through the recipe model's compact chat template (loss only on assistant turns)."""

import asyncio
from fractions import Fraction

import pandas as pd
import pytest
import torch

from recipe.calc_tool.calculator import BUSY, CalculatorError, CalculatorTool, evaluate, format_number
from recipe.calc_tool.create_dataset import (
    DATA_SOURCE,
    answer_text,
    busy_calls,
    make_problems,
    rl_rows,
    sft_rows,
    tool_call_text,
    write_dataset,
)
from recipe.calc_tool.reward_function import calc_tool_reward_function
from verl.multi_turn.tool_parser import get_tool_parser


# ------------------------------------------------------------------------------------------------ generator
def test_generator_is_seeded_and_multiplies_right():
    problems = make_problems(500, seed=3)
    assert problems == make_problems(500, seed=3) and problems != make_problems(500, seed=4)
    assert len({(a, b) for a, b, _ in problems}) == 500
    assert all(p == a * b and 10 <= a <= 99 and 10 <= b <= 99 for a, b, p in problems)
    mixed = make_problems(400, seed=0, min_digits=2, max_digits=3)
    assert {len(str(a)) for a, _, _ in mixed} == {2, 3} and all(10 <= b <= 999 for _, b, _ in mixed)
    with pytest.raises(ValueError, match="only"):
        make_problems(5000, min_digits=2, max_digits=2)


def test_sft_corpus_is_sloppy_in_the_stated_shares():
    problems = make_problems(200, seed=1)
    rows = sft_rows(problems, skip_tool=0.6, miscopy=0.25, seed=1)
    kinds = [r["kind"] for r in rows]
    assert kinds.count("skip") == 120 and kinds.count("miscopy") == round(0.25 * 80)
    assert rows == sft_rows(problems, skip_tool=0.6, miscopy=0.25, seed=1)
    for (a, b, product), row in zip(problems, rows):
        messages = row["messages"]
        assert messages[0] == {"role": "user", "content": f"{a}*{b}"}
        final = messages[-1]["content"]
        if row["kind"] == "skip":
            assert len(messages) == 2 and final == answer_text(product)
            continue
        call = get_tool_parser("hermes").parse(messages[1]["content"]).calls[0]  # what the rollout will read
        assert call.name == "calculator" and evaluate(eval_arguments(call.arguments)) == product
        assert messages[2] == {"role": "tool", "content": str(product)}
        wrong = [x != y for x, y in zip(final, answer_text(product))]
        assert sum(wrong) == (row["kind"] == "miscopy") and len(final) == len(answer_text(product))


def eval_arguments(arguments: str) -> str:
    import json

    return json.loads(arguments)["expression"]


def test_dataset_files_hold_out_the_test_problems(tmp_path):
    paths = write_dataset(str(tmp_path), seed=0, num_train=300, num_test=40, num_rl_train=50)
    sft_train, test, train = (pd.read_parquet(paths[k]) for k in ("sft_train", "test", "train"))
    test_prompts = {p[0]["content"] for p in test.prompt}
    assert len(test) == 40 and len(train) == 50 and len(sft_train) == 300
    assert not test_prompts & {m[0]["content"] for m in sft_train.messages}
    row = test.iloc[0]
    a, b = row.extra_info["a"], row.extra_info["b"]
    assert row.data_source == DATA_SOURCE and row.reward_model["ground_truth"] == str(a * b)
    assert "calculator" in row.extra_info["tools_kwargs"]
    again = write_dataset(str(tmp_path / "again"), seed=0, num_train=300, num_test=40, num_rl_train=50)
    assert pd.read_parquet(again["sft_train"]).equals(sft_train)


# ------------------------------------------------------------------------------------------------ calculator
@pytest.mark.parametrize(
    ("expression", "value"),
    [
        ("37*45", 1665),
        (" 2 + 3 * 4 ", 14),
        ("(2+3)*4", 20),
        ("2**10", 1024),
        ("2**3**2", 512),  # right-associative, as in Python
        ("-2**2", -4),
        ("7/2", Fraction(7, 2)),
        ("7//2", 3),
        ("-7%3", 2),
        ("0.1+0.2", Fraction(3, 10)),
        ("2*-3", -6),
        ("2**-1", Fraction(1, 2)),
    ],
)
def test_calculator_values(expression, value):
    assert evaluate(expression) == value


@pytest.mark.parametrize(
    "expression",
    [
        "__import__('os').system('true')",
        "abs(-3)",
        "x*2",
        "(1).__class__",
        "1,2",
        "2**1000",
        "9**9**9",
        "10**20*10**20",
        "1/0",
        "3+",
        "()",
        "",
        "(" * 40 + "1" + ")" * 40,
        "1" * 201,
    ],
)
def test_calculator_refuses(expression):
    with pytest.raises(CalculatorError):
        evaluate(expression)


def test_calculator_tool_answers_and_reports_errors():
    tool = CalculatorTool({})
    assert tool.name == "calculator"
    assert tool.tool_schema.function.parameters.required == ["expression"]
    assert asyncio.run(tool.execute("t", {"expression": "12*34"}))[0] == "408"
    assert asyncio.run(tool.execute("t", {"expression": "1/3"}))[0] == "0.3333333333"
    assert asyncio.run(tool.execute("t", {"expression": "open('x')"}))[0].startswith("Error:")
    assert asyncio.run(tool.execute("t", {}))[0].startswith("Error:")
    assert format_number(Fraction(-5, 2)) == "-2.5"


def test_slow_busy_calculator_waits_and_turns_calls_away():
    tool = CalculatorTool({"latency_s": 0.2})

    async def trajectory():
        instance = await tool.create("t", busy_calls=2, ground_truth="408")
        start = asyncio.get_running_loop().time()
        answers = [(await tool.execute(instance, {"expression": "12*34"}))[0] for _ in range(3)]
        elapsed = asyncio.get_running_loop().time() - start
        await tool.release(instance)
        return answers, elapsed

    answers, elapsed = asyncio.run(trajectory())
    assert answers == [BUSY, BUSY, "408"]
    assert elapsed >= 3 * 0.2
    with pytest.raises(ValueError, match="latency_s"):
        CalculatorTool({"latency_s": -1})


def test_busy_calls_have_a_long_tail_and_reach_rows_and_conversations():
    counts = [busy_calls(i, 4, seed=7) for i in range(4000)]
    shares = [counts.count(k) / len(counts) for k in range(5)]
    assert set(counts) == {0, 1, 2, 3, 4}
    assert 0.45 < shares[0] < 0.55 and 0.2 < shares[1] < 0.3 and shares[1] > shares[2] > shares[3] > 0.04
    assert busy_calls(3, 0) == 0 and counts == [busy_calls(i, 4, seed=7) for i in range(4000)]
    problems = make_problems(40, seed=0)
    rows = rl_rows(problems, "train", busy_max=4, seed=0)
    busy = [r["extra_info"]["tools_kwargs"]["calculator"]["create_kwargs"]["busy_calls"] for r in rows]
    assert busy == [busy_calls(i, 4, 7) for i in range(40)]
    for i, row in enumerate(sft_rows(problems, skip_tool=0.0, miscopy=0.0, busy_max=2)):
        tool_answers = [m["content"] for m in row["messages"] if m["role"] == "tool"]
        assert tool_answers == [BUSY] * busy_calls(i, 2, 0) + [str(problems[i][2])]


def test_tool_config_builds_the_calculator():
    import os

    from verl.multi_turn.tools.base_tool import initialize_tools_from_config

    root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    (tool,) = initialize_tools_from_config(os.path.join(root, "recipe", "calc_tool", "tool_config.yaml"))
    assert isinstance(tool, CalculatorTool) and tool.name == "calculator"


# ------------------------------------------------------------------------------------------------ reward
@pytest.mark.parametrize(
    ("response", "expected"),
    [
        ('<tool_call>{"name":"calculator"}</tool_call>\ntool\n408\nassistant\nanswer: 408', 1.0),
        ("answer: 408", 1.0),
        ("answer: 408\n", 1.0),
        ("answer: 409", 0.0),
        ("answer: 408\nanswer: 1", 0.0),  # only the final line counts
        ("408", 0.0),
        ("answer: 408 apples", 0.0),
        ("answer: 0408", 0.0),
        ('answer: 408\n<tool_call>{"name":"calculator"', 0.0),  # ended inside a call
        ("", 0.0),
    ],
)
def test_reward_reads_the_final_answer(response, expected):
    assert calc_tool_reward_function(DATA_SOURCE, response, "408", extra_info={}) == expected


# ------------------------------------------------------------------------------------------------ chat template
@pytest.fixture(scope="module")
def tokenizer(tmp_path_factory):
    from transformers import AutoTokenizer

    from recipe.calc_tool.init_model import make_model_dir

    return AutoTokenizer.from_pretrained(make_model_dir(str(tmp_path_factory.mktemp("model"))))


def test_sft_data_renders_with_loss_only_on_assistant_turns(tmp_path, tokenizer):
    from recipe.calc_tool.sft_dataset import CalcToolSFTDataset
    from verl.utils.dataset.multiturn_sft_dataset import MultiTurnSFTDataset

    paths = write_dataset(str(tmp_path), seed=0, num_train=20, num_test=8, num_rl_train=4)
    config = {"max_length": 176}
    marked = MultiTurnSFTDataset(paths["sft_test"], tokenizer, config)  # 1 on the assistant tokens themselves
    shifted = CalcToolSFTDataset(paths["sft_test"], tokenizer, config)  # 1 where the *next* token is one of them
    frame = pd.read_parquet(paths["sft_test"])
    for i, kind in enumerate(frame.kind):
        item, target = marked[i], shifted[i]
        ids, mask = item["input_ids"], item["loss_mask"]
        valid = int(item["attention_mask"].sum())
        assert mask[valid:].sum() == 0 and torch.equal(target["input_ids"], ids)
        text = tokenizer.decode(ids[:valid])
        assert text.startswith("<|im_start|>system\ntools: calculator<|im_end|>\n<|im_start|>user\n")
        assistant = [m["content"] for m in frame.messages[i] if m["role"] == "assistant"]
        expected = "".join(f"{content}<|im_end|>\n" for content in assistant)
        assert tokenizer.decode(ids[mask.bool()]) == expected, kind
        # the SFT trainer trains position t to predict token t + 1 where loss_mask[t] == 1
        assert tokenizer.decode(ids[1:][target["loss_mask"][:-1].bool()]) == expected
        assert target["loss_mask"][-1] == 0
        assert (kind == "skip") == ("<tool_call>" not in expected)


def test_template_is_compact_and_prefix_stable(tokenizer):
    from recipe.calc_tool.calculator import SCHEMA

    messages = [
        {"role": "user", "content": "37*45"},
        {"role": "assistant", "content": tool_call_text("37*45")},
        {"role": "tool", "content": "1665"},
        {"role": "assistant", "content": answer_text(1665)},
    ]

    def render(k, prompt=False):
        text = tokenizer.apply_chat_template(messages[:k], tools=[SCHEMA], tokenize=False, add_generation_prompt=prompt)
        return tokenizer.encode(text, add_special_tokens=False)

    assert len(render(1, prompt=True)) < 64  # the shipped template's tool preamble is ~600 tokens
    for k in range(1, len(messages)):
        assert render(k + 1)[: len(render(k))] == render(k)
        if messages[k]["role"] == "assistant":  # the generation prompt opens the assistant turn that follows
            assert render(k + 1)[: len(render(k, prompt=True))] == render(k, prompt=True)
    # an assistant turn given as OpenAI tool_calls renders as a Hermes call the rollout's parser reads the same way
    call = {"function": {"name": "calculator", "arguments": {"expression": "37*45"}}}
    structured = [messages[0], {"role": "assistant", "content": "", "tool_calls": [call]}]
    text = tokenizer.apply_chat_template(structured, tools=[SCHEMA], tokenize=False)
    turn = text.split("<|im_start|>assistant\n")[1].removesuffix("<|im_end|>\n")
    parser = get_tool_parser("hermes")
    assert parser.parse(turn).calls == parser.parse(messages[1]["content"]).calls
