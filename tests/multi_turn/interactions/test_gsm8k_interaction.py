"""Gsm8kInteraction: which message is scored, the scorer call, the two replies, the instance life cycle, the shipped
config and a row of examples/data_preprocess/gsm8k_multiturn_w_interaction.py driving it end to end."""

import asyncio
import importlib
import os
from unittest import mock

import pytest

from verl.multi_turn.interactions.gsm8k_interaction import Gsm8kInteraction
from verl.multi_turn.interactions.utils.interaction_registry import initialize_interaction_from_config

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))
INTERACTION_CONFIG = os.path.join(
    ROOT, "examples", "multiturn", "config", "interaction_config", "gsm8k_interaction_config.yaml"
)
CORRECT = (True, "Your response is correct!", 1.0, {})
INCORRECT = (False, "Your response is incorrect! You need to reflect on your answer and try again.", 0.0, {})


def _run(coro):
    return asyncio.run(coro)


def _reply(interaction, ground_truth, messages):
    """Start a conversation, answer ``messages`` once, and return (reply, stored response)."""

    async def scenario():
        iid = await interaction.start_interaction(ground_truth=ground_truth)
        reply = await interaction.generate_response(iid, messages)
        return reply, interaction._instance_dict[iid]["response"]

    return _run(scenario())


@pytest.fixture()
def interaction():
    return Gsm8kInteraction(config={})


def test_start_stores_the_documented_state(interaction):
    async def scenario():
        generated = await interaction.start_interaction(ground_truth="72")
        named = await interaction.start_interaction("conv-1", ground_truth="5")
        return generated, named

    generated, named = _run(scenario())
    assert len(generated) == 36 and named == "conv-1"
    assert interaction._instance_dict == {
        generated: {"response": "", "ground_truth": "72", "reward": 0.0},
        "conv-1": {"response": "", "ground_truth": "5", "reward": 0.0},
    }


@pytest.mark.parametrize(
    "messages, stored, expected",
    [
        ([{"role": "user", "content": "72"}], "#### 72", CORRECT),
        ([{"role": "user", "content": "#### 72"}], "#### 72", CORRECT),  # no second prefix
        ([{"role": "user", "content": "It is 71"}], "#### It is 71", INCORRECT),
        # the last *user* message is scored, whatever the assistant said after it
        ([{"role": "user", "content": "72"}, {"role": "assistant", "content": "71"}], "#### 72", CORRECT),
        ([{"role": "user", "content": "71"}, {"role": "assistant", "content": "72"}], "#### 71", INCORRECT),
        ([{"role": "user", "content": "1"}, {"role": "user", "content": "so 72"}], "#### so 72", CORRECT),
        ([{"role": "assistant", "content": "72"}], "#### ", INCORRECT),  # no user message: empty answer
        # a last user message without content is an empty answer, as verl stores it ("#### " + (content or "")):
        # the search stops there, an earlier user message is not scored instead
        ([{"role": "user", "content": "72"}, {"role": "user"}], "#### ", INCORRECT),
        ([{"role": "user", "content": None}], "#### ", INCORRECT),
    ],
)
def test_which_message_is_scored_and_the_reply(interaction, messages, stored, expected):
    assert _reply(interaction, "72", messages) == (expected, stored)


def test_the_scorer_call_and_a_partial_score(interaction):
    with mock.patch("verl.utils.reward_score.gsm8k.compute_score", return_value=0.5) as scorer:
        reply, _ = _reply(interaction, "42", [{"role": "user", "content": "42"}])
    scorer.assert_called_once_with("#### 42", "42", method="flexible", format_score=0.0, score=1.0)
    # anything short of 1.0 keeps the conversation going and reports the score as it is
    assert reply == (False, INCORRECT[1], 0.5, {})


def test_calculate_score_and_finalize(interaction):
    async def scenario():
        iid = await interaction.start_interaction("c", ground_truth="9")
        before = await interaction.calculate_score(iid)
        await interaction.generate_response(iid, [{"role": "user", "content": "9"}])
        after = await interaction.calculate_score(iid)
        await interaction.finalize_interaction(iid)
        assert interaction._instance_dict == {}
        with pytest.raises(KeyError, match="'c'"):
            await interaction.finalize_interaction(iid)
        with pytest.raises(KeyError, match="no instance .*never started"):
            await interaction.generate_response(iid, [])
        return before, after

    assert _run(scenario()) == (0.0, 1.0)


def test_shipped_config_builds_the_interaction():
    interaction = initialize_interaction_from_config(INTERACTION_CONFIG)
    assert type(interaction) is Gsm8kInteraction
    # the entry's name reaches the interaction, so rows' interaction_kwargs["name"] match it
    assert interaction.config == {"name": "gsm8k"} and interaction.name == "gsm8k"


def test_a_preprocessed_row_drives_the_interaction_end_to_end(monkeypatch):
    # the row format itself (through parquet) is checked in tests/multi_turn/tools/test_gsm8k_tool.py
    monkeypatch.syspath_prepend(os.path.join(ROOT, "examples", "data_preprocess"))
    make_map_fn = importlib.import_module("gsm8k_multiturn_w_interaction").make_map_fn
    row = make_map_fn("test")({"question": "A debt of 5 less 8?", "answer": "5 - 8 = -3\n#### -3"}, 0)
    kwargs = row["extra_info"]["interaction_kwargs"]
    assert kwargs == {"name": "gsm8k", "query": "A debt of 5 less 8?", "ground_truth": "-3"}
    interaction = initialize_interaction_from_config(INTERACTION_CONFIG)

    # what the rollout does with a row: start with interaction_kwargs, answer twice, finalize
    async def conversation():
        iid = await interaction.start_interaction("req-1", **kwargs)
        wrong = await interaction.generate_response(iid, [*row["prompt"], {"role": "user", "content": "3"}], **kwargs)
        right = await interaction.generate_response(iid, [{"role": "user", "content": "so -3"}], **kwargs)
        await interaction.finalize_interaction(iid)
        return wrong, right

    assert _run(conversation()) == (INCORRECT, CORRECT)
    assert interaction._instance_dict == {}
