"""Geo3kTool (verl's ``calc_geo3k_reward``): hand-graded answers, the scorer call, the shipped config; the rows of
examples/data_preprocess/geo3k_multiturn_w_tool.py driving the tool end to end."""

import asyncio
import os
import sys
from unittest import mock

import pandas as pd
import pytest

from verl.multi_turn.tools.answer_check_tool import NO_IMPROVEMENT_PENALTY as PENALTY
from verl.multi_turn.tools.base_tool import initialize_tools_from_config
from verl.multi_turn.tools.geo3k_tool import Geo3kTool

EXAMPLES = os.path.join(os.path.dirname(os.path.abspath(__file__)), *[os.pardir] * 3, "examples")
TOOL_CONFIG = os.path.join(EXAMPLES, "multiturn", "config", "tool_config", "geo3k_tool_config.yaml")


@pytest.fixture()
def tool():
    return Geo3kTool(config={})


def test_answers_are_graded_as_strings_numbers_and_expressions(tool):
    async def scenario():
        iid = await tool.create("traj-0", ground_truth="2\\sqrt{3}")
        # (answer, expected score, expected step reward): the step reward is 0.0 only when the score rises
        steps = [
            ("3", 0.0, PENALTY),  # wrong: 0.0 is not above the starting 0.0
            ("2\\sqrt{3}", 1.0, 0.0),  # the ground truth itself
            ("3.4641016", 1.0, PENALTY),  # the same number (relative tolerance 1e-6): no improvement
            ("no idea", 0.0, PENALTY),
            ("2*sqrt(3)", 1.0, 0.0),  # the same expression, written otherwise
        ]
        for answer, score, step in steps:
            text, step_reward, metrics = await tool.execute(iid, {"answer": answer})
            assert text == f"Current parsed answer={answer!r} reward={score!r}"
            assert (step_reward, metrics) == (step, {})
            assert await tool.calc_reward(iid) == score
        await tool.release(iid)
        assert tool._instance_dict == {}

    asyncio.run(scenario())


def test_the_scorer_grades_the_whole_answer_without_format_credit(tool):
    async def scenario():
        iid = await tool.create(ground_truth="40")
        return await tool.execute(iid, {"answer": 40})  # a number from the model is read as text

    with mock.patch("verl.utils.reward_score.geo3k.compute_score", return_value=0.5) as scorer:
        text, step_reward, _ = asyncio.run(scenario())
    scorer.assert_called_once_with("40", "40", use_boxed=False, format_score=0.0)
    assert (text, step_reward) == ("Current parsed answer='40' reward=0.5", 0.0)
    assert Geo3kTool.REQUIRED_CREATE_KWARGS == ("ground_truth",)


def test_shipped_config_builds_the_tool_with_the_default_schema():
    (tool,) = initialize_tools_from_config(TOOL_CONFIG)  # class_name: verl.tools.geo3k_tool.Geo3kTool
    assert type(tool) is Geo3kTool and tool.name == "calc_geo3k_reward"
    # the YAML's schema and the class default must not drift apart
    assert tool.tool_schema == Geo3kTool(config={}).tool_schema


def test_preprocessed_rows_drive_the_tool_end_to_end(tmp_path, monkeypatch):
    from verl.demo.tiny_vlm import write_tiny_geometry3k

    monkeypatch.syspath_prepend(os.path.join(EXAMPLES, "data_preprocess"))
    monkeypatch.delitem(sys.modules, "geo3k_multiturn_w_tool", raising=False)
    import geo3k_multiturn_w_tool

    raw = write_tiny_geometry3k(str(tmp_path / "raw"), num_train=2, num_test=1)
    geo3k_multiturn_w_tool.main(["--local_dataset_path", raw, "--local_dir", str(tmp_path / "out")])
    row = pd.read_parquet(tmp_path / "out" / "train.parquet").iloc[1]
    system, user = row["prompt"]
    assert system["role"] == "system" and "calc_geo3k_reward" in system["content"]
    assert user["role"] == "user" and user["content"].startswith("<image>")
    assert row["agent_name"] == "tool_agent" and len(row["images"]) == 1
    truth = row["reward_model"]["ground_truth"]
    assert row["extra_info"]["need_tools_kwargs"]
    assert row["extra_info"]["tools_kwargs"] == {"calc_geo3k_reward": {"create_kwargs": {"ground_truth": truth}}}
    (tool,) = initialize_tools_from_config(TOOL_CONFIG)

    async def trajectory():
        kwargs = row["extra_info"]["tools_kwargs"][tool.name]
        iid = await tool.create("req-1", **kwargs["create_kwargs"])
        first = await tool.execute(iid, {"answer": truth + "1"})
        second = await tool.execute(iid, {"answer": truth})
        reward = await tool.calc_reward(iid)
        await tool.release(iid)
        return first[1:], second[1:], reward

    assert asyncio.run(trajectory()) == ((PENALTY, {}), (0.0, {}), 1.0)
