"""Gsm8kTool: hand-computed rewards, the scorer call, the instance life cycle, the shipped config; the rows of
examples/data_preprocess/gsm8k_multiturn_w_{tool,interaction}.py, and the tool driven end to end by them."""

import asyncio
import importlib
import os
import uuid
from unittest import mock

import pandas as pd
import pytest

from verl.multi_turn.tools.base_tool import initialize_tools_from_config
from verl.multi_turn.tools.gsm8k_tool import Gsm8kTool

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))
TOOL_CONFIG = os.path.join(ROOT, "examples", "multiturn", "config", "tool_config", "gsm8k_tool_config.yaml")
PENALTY = -0.05


def _run(coro):
    return asyncio.run(coro)


@pytest.fixture()
def tool():
    return Gsm8kTool(config={})


def test_default_schema_is_calc_gsm8k_reward_with_one_string_answer(tool):
    fn = tool.tool_schema.function
    assert (tool.name, fn.name) == ("calc_gsm8k_reward", "calc_gsm8k_reward")
    assert list(fn.parameters.properties) == ["answer"]
    assert fn.parameters.properties["answer"].type == "string"
    assert fn.parameters.required == ["answer"]


def test_rewards_for_wrong_right_repeated_and_recovered_answers(tool):
    async def scenario():
        iid = await tool.create("traj-0", ground_truth="72")
        # (answer, expected score, expected step reward): the step reward is 0.0 only when the score rises
        steps = [
            ("71", 0.0, PENALTY),  # wrong: 0.0 is not above the starting 0.0
            ("72", 1.0, 0.0),  # right: 1.0 > 0.0
            ("#### 72", 1.0, PENALTY),  # right again: no improvement
            ("no idea", 0.0, PENALTY),  # no number at all
            ("So she sold 72 clips", 1.0, 0.0),  # flexible parsing: the last number counts
        ]
        for answer, score, step in steps:
            text, step_reward, metrics = await tool.execute(iid, {"answer": answer})
            assert text == f"Current parsed answer={answer!r} reward={score!r}"
            assert (step_reward, metrics) == (step, {})
            assert await tool.calc_reward(iid) == score

    _run(scenario())


def test_a_numeric_answer_is_read_as_text(tool):
    async def scenario():
        iid = await tool.create(ground_truth="-3")
        return await tool.execute(iid, {"answer": -3}), await tool.calc_reward(iid)

    assert _run(scenario()) == (("Current parsed answer='-3' reward=1.0", 0.0, {}), 1.0)


@pytest.mark.parametrize("answer", ["42", "#### 42"])
def test_the_scorer_sees_one_hash_prefix_and_the_flexible_settings(tool, answer):
    async def scenario():
        iid = await tool.create(ground_truth="42")
        return await tool.execute(iid, {"answer": answer})

    with mock.patch("verl.utils.reward_score.gsm8k.compute_score", return_value=0.5) as scorer:
        text, step_reward, _ = _run(scenario())
    scorer.assert_called_once_with("#### 42", "42", method="flexible", format_score=0.0, score=1.0)
    assert (text, step_reward) == (f"Current parsed answer={answer!r} reward=0.5", 0.0)


def test_create_and_release_life_cycle(tool):
    async def scenario():
        generated = await tool.create(ground_truth="7")
        assert str(uuid.UUID(generated)) == generated
        assert await tool.create("mine", ground_truth="8") == "mine"
        assert await tool.calc_reward("mine") == 0.0  # nothing answered yet
        # instances keep separate state
        assert (await tool.execute(generated, {"answer": "7"}))[1] == 0.0
        assert (await tool.execute("mine", {"answer": "7"}))[1] == PENALTY
        assert (await tool.calc_reward(generated), await tool.calc_reward("mine")) == (1.0, 0.0)
        await tool.release(generated)
        assert list(tool._instance_dict) == ["mine"]
        with pytest.raises(KeyError, match="no instance .*never started or is already released"):
            await tool.execute(generated, {"answer": "7"})
        with pytest.raises(KeyError, match=generated):
            await tool.release(generated)

    _run(scenario())


def test_shipped_config_builds_the_tool_with_the_default_schema():
    (tool,) = initialize_tools_from_config(TOOL_CONFIG)
    assert type(tool) is Gsm8kTool
    assert tool.config == {"type": "native"}
    # the YAML's schema and the class default must not drift apart
    assert tool.tool_schema == Gsm8kTool(config={}).tool_schema


ROWS = [
    {"question": "Ann has 3 pens and buys 4. How many?", "answer": "3 + 4 = 7\n#### 7"},
    {"question": "Two cars at 1,200 each?", "answer": "2 * 1,200 = 2,400\n#### 2,400"},
]


def _preprocess(tmp_path, monkeypatch, script):
    """Run ``examples/data_preprocess/<script>.py`` on ROWS as local jsonl files; returns the train rows."""
    monkeypatch.syspath_prepend(os.path.join(ROOT, "examples", "data_preprocess"))
    for split in ("train", "test"):
        pd.DataFrame(ROWS).to_json(tmp_path / f"{split}.jsonl", orient="records", lines=True)
    out = tmp_path / "out"
    importlib.import_module(script).main(
        ["--local_dataset_path", str(tmp_path / "{split}.jsonl"), "--local_dir", str(out)]
    )
    assert sorted(os.listdir(out)) == ["test.parquet", "train.parquet"]
    assert pd.read_parquet(out / "test.parquet").iloc[0]["extra_info"]["split"] == "test"
    return pd.read_parquet(out / "train.parquet")


@pytest.mark.parametrize("script", ["gsm8k_multiturn_w_tool", "gsm8k_multiturn_w_interaction"])
def test_multiturn_preprocessors_write_the_documented_rows(tmp_path, monkeypatch, script):
    df = _preprocess(tmp_path, monkeypatch, script)
    assert set(df.columns) == {"data_source", "prompt", "ability", "reward_model", "extra_info"}
    row = df.iloc[1]
    assert (row["data_source"], row["ability"]) == ("openai/gsm8k", "math")
    assert row["reward_model"] == {"style": "rule", "ground_truth": "2400"}
    system, user = row["prompt"]
    with_tools = script.endswith("_w_tool")
    assert system["role"] == "system" and "####" in system["content"]
    assert ("calc_gsm8k_reward" in system["content"]) == with_tools
    assert user == {
        "role": "user",
        "content": ROWS[1]["question"] + " Let's think step by step and output the final answer after `####`.",
    }
    expected = {
        "split": "train",
        "index": 1,
        "answer": ROWS[1]["answer"],
        "question": ROWS[1]["question"],
        "interaction_kwargs": {"name": "gsm8k", "query": ROWS[1]["question"], "ground_truth": "2400"},
    }
    if with_tools:
        expected["need_tools_kwargs"] = True
        expected["tools_kwargs"] = {"calc_gsm8k_reward": {"create_kwargs": {"ground_truth": "2400"}}}
    assert row["extra_info"] == expected


def test_preprocessed_rows_drive_the_tool_end_to_end(tmp_path, monkeypatch):
    row = _preprocess(tmp_path, monkeypatch, "gsm8k_multiturn_w_tool").iloc[1]
    # what the rollout does with a row: create from create_kwargs, call, score, release
    (tool,) = initialize_tools_from_config(TOOL_CONFIG)

    async def trajectory():
        kwargs = row["extra_info"]["tools_kwargs"][tool.name]
        iid = await tool.create("req-1", **kwargs["create_kwargs"])
        first = await tool.execute(iid, {"answer": "2200"})
        second = await tool.execute(iid, {"answer": "2400"})
        reward = await tool.calc_reward(iid)
        await tool.release(iid)
        return first[1:], second[1:], reward

    assert _run(trajectory()) == ((PENALTY, {}), (0.0, {}), 1.0)
    assert tool._instance_dict == {}
