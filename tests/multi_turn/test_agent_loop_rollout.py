"""Multi-turn rollout: the Hermes parser, the turn loop's bookkeeping (loss mask, token ids equal to the re-tokenised
conversation, tool errors as messages, budgets), and the real HF engine on a tiny model."""

import asyncio
import json
import logging
import time

import numpy as np
import pytest
import torch
from omegaconf import OmegaConf
from transformers import AutoTokenizer

from verl.demo.tiny_model import make_tiny_model_dir
from verl.multi_turn import GeneratedTurn, MultiTurnRollout, get_tool_parser
from verl.multi_turn.agent_loop.tool_agent import truncate_text
from verl.multi_turn.chat_template import ChatTemplate
from verl.multi_turn.interactions.base import BaseInteraction
from verl.multi_turn.rollout import pop_agent_loop_metrics
from verl.multi_turn.tools.base_tool import BaseTool
from verl.multi_turn.tools.schemas import OpenAIFunctionToolSchema
from verl.protocol import DataProto
from verl.trainer.config import RolloutConfig

TOKENIZER = "verl/assets/tokenizer"
P, T = 1024, 1024  # byte-level tokenizer: the tool schema alone is ~600 tokens


# ------------------------------------------------------------------------------------------------ parser
def test_hermes_parses_well_formed_malformed_and_partial_calls():
    parser = get_tool_parser("hermes")
    text = (
        'Let me check.<tool_call>\n{"name": "mul", "arguments": {"a": 12, "b": 34}}\n</tool_call>'
        '<tool_call>{"name": "mul", "arguments": "{\\"a\\": 1}"}</tool_call>'
        "<tool_call>{not json}</tool_call>"
        '<tool_call>{"arguments": {}}</tool_call>'
        '<tool_call>{"name": "mul", "argu'
    )
    turn = parser.parse(text)
    assert turn.content == "Let me check."
    assert [(c.name, json.loads(c.arguments)) for c in turn.calls] == [("mul", {"a": 12, "b": 34}), ("mul", {"a": 1})]
    assert len(turn.errors) == 3
    assert "not valid JSON" in turn.errors[0] and "'name'" in turn.errors[1] and "unfinished" in turn.errors[2]
    assert parser.parse("no calls here").calls == []
    with pytest.raises(KeyError, match="multi_turn.format='xml'.*hermes"):
        get_tool_parser("xml")


def test_truncate_text_sides():
    assert truncate_text("abcdefghij", 4, "left") == "abcd...(truncated)..."
    assert truncate_text("abcdefghij", 4, "right") == "...(truncated)...ghij"
    assert truncate_text("abcdefghij", 4, "middle") == "ab...(truncated)...ij"
    assert truncate_text("abc", 4, "middle") == "abc"


# ------------------------------------------------------------------------------------------------ the loop
MUL_SCHEMA = {
    "type": "function",
    "function": {
        "name": "mul",
        "description": "Multiply two integers.",
        "parameters": {
            "type": "object",
            "properties": {"a": {"type": "integer"}, "b": {"type": "integer"}},
            "required": ["a", "b"],
        },
    },
}


class MulTool(BaseTool):
    """Multiplies; its reward is the number of calls the trajectory made."""

    def __init__(self, config=None, tool_schema=None):
        super().__init__(config or {}, tool_schema or OpenAIFunctionToolSchema.model_validate(MUL_SCHEMA))
        self.calls, self.released = {}, []

    async def create(self, instance_id=None, **kwargs):
        self.calls[instance_id] = 0
        return instance_id

    async def execute(self, instance_id, parameters, **kwargs):
        if parameters.get("a") == "slow":
            await asyncio.sleep(5)
        self.calls[instance_id] += 1
        return f"result={int(parameters['a']) * int(parameters['b'])}", 0.0, {}

    async def calc_reward(self, instance_id, **kwargs):
        return float(self.calls[instance_id])

    async def release(self, instance_id, **kwargs):
        self.released.append(instance_id)


class ScriptedEngine:
    """Answers turn k of a conversation with ``replies[k]`` (k = tool/user responses seen so far)."""

    def __init__(self, tokenizer, replies, end_id):
        self.tokenizer, self.replies, self.end_id = tokenizer, replies, end_id
        self.calls = 0

    def generate_turns(self, prompts, max_tokens, request, stop_token_ids):
        assert self.end_id in stop_token_ids
        self.calls += 1
        turns = []
        for ids, limit in zip(prompts, max_tokens):
            seen = self.tokenizer.decode(ids)
            k = seen.count("<tool_response>") + seen.count("Try again")
            tokens = self.tokenizer.encode(self.replies[min(k, len(self.replies) - 1)], add_special_tokens=False)
            tokens = (tokens + [self.end_id])[:limit]
            turns.append(GeneratedTurn(tokens, [-0.5] * len(tokens)))
        return turns


def _config(**multi_turn):
    return RolloutConfig.from_config(
        OmegaConf.create(
            {
                "name": "hf",
                "prompt_length": P,
                "response_length": T,
                "n": 2,
                "do_sample": True,
                "multi_turn": {"enable": True, **multi_turn},
            }
        )
    )


def _prompts(tokenizer, rows=1, tools_kwargs=None):
    raw = np.empty(rows, dtype=object)
    raw[:] = [[{"role": "user", "content": f"What is 12*{30 + i}?"}] for i in range(rows)]
    non_tensor = {"raw_prompt": raw, "data_source": np.array(["calc"] * rows, dtype=object)}
    if tools_kwargs is not None:
        kwargs = np.empty(rows, dtype=object)
        kwargs[:] = [tools_kwargs] * rows
        non_tensor["tools_kwargs"] = kwargs
    meta = {"eos_token_id": tokenizer.eos_token_id, "pad_token_id": tokenizer.pad_token_id}
    return DataProto.from_dict(
        tensors={"input_ids": torch.zeros(rows, 4, dtype=torch.long)}, non_tensors=non_tensor, meta_info=meta
    )


CALL = '<tool_call>\n{"name": "mul", "arguments": {"a": 12, "b": 30}}\n</tool_call>'


@pytest.fixture(scope="module")
def tokenizer():
    return AutoTokenizer.from_pretrained(TOKENIZER)


def _rollout(tokenizer, replies, tool=None, **multi_turn):
    end = ChatTemplate(tokenizer).end_of_turn_id
    engine = ScriptedEngine(tokenizer, replies, end)
    return MultiTurnRollout(engine, _config(**multi_turn), tokenizer, tools=[tool or MulTool()]), engine


def test_tool_turn_then_answer_masks_and_token_ids(tokenizer):
    tool = MulTool()
    rollout, engine = _rollout(tokenizer, [CALL, "The answer is 360."], tool=tool)
    out = rollout.generate_sequences(_prompts(tokenizer, rows=2))
    assert len(out) == 4 and engine.calls == 2  # 2 prompts x n=2, two turns each, one engine call per turn
    chat = ChatTemplate(tokenizer)
    for i in range(4):
        messages = out.non_tensor_batch["messages"][i]
        assert [m["role"] for m in messages] == ["user", "assistant", "tool", "assistant"]
        assert messages[2]["content"] == "result=360"
        mask = out.batch["attention_mask"][i].bool()
        ids = out.batch["input_ids"][i][mask].tolist()
        # the trajectory's ids are exactly the template's rendering of its final conversation
        rendered = chat.render_ids(messages, [tool.tool_schema.model_dump(exclude_none=True)], False)
        assert ids == rendered[: len(ids)] and len(rendered) - len(ids) <= 1  # only the template's last newline
        # loss_mask is 1 exactly on the two generated turns (their text plus <|im_end|>)
        response = out.batch["responses"][i]
        lm = out.batch["loss_mask"][i, P:]
        generated = response[lm.bool()].tolist()
        expected = (
            tokenizer.encode(CALL, add_special_tokens=False)
            + [chat.end_of_turn_id]
            + tokenizer.encode("The answer is 360.", add_special_tokens=False)
            + [chat.end_of_turn_id]
        )
        assert generated == expected
        assert out.batch["loss_mask"][i, :P].sum() == 0
        assert (out.batch["rollout_log_probs"][i][lm.bool()] == -0.5).all()
        assert out.non_tensor_batch["reward_scores"][i] == {"mul": 1.0, "user_turn_rewards": []}
    assert list(out.non_tensor_batch["data_source"]) == ["calc"] * 4
    assert len(tool.released) == 4
    assert pop_agent_loop_metrics(out)["multi_turn/token_drift_trajectories"] == 0
    positions = out.batch["position_ids"][0][out.batch["attention_mask"][0].bool()]
    assert torch.equal(positions, torch.arange(len(positions)))


def test_tool_errors_become_messages_and_the_trajectory_goes_on(tokenizer):
    bad = (
        '<tool_call>{"name": "nope", "arguments": {}}</tool_call>'
        '<tool_call>{"name": "mul", "arguments": [1, 2]}</tool_call>'
        "<tool_call>{oops}</tool_call>"
    )
    rollout, _ = _rollout(tokenizer, [bad, "Done."], max_parallel_calls=None)
    out = rollout.generate_sequences(_prompts(tokenizer))
    messages = out.non_tensor_batch["messages"][0]
    tool_texts = [m["content"] for m in messages if m["role"] == "tool"]
    assert "no tool named 'nope'" in tool_texts[0]
    assert "must be a JSON object" in tool_texts[1]
    assert "not valid JSON" in tool_texts[2]
    assert messages[-1] == {"role": "assistant", "content": "Done."}
    assert out.non_tensor_batch["reward_scores"][0]["mul"] == 0.0


def test_timeout_parallel_limit_truncation_and_turn_budget(tokenizer):
    slow = '<tool_call>{"name": "mul", "arguments": {"a": "slow", "b": 1}}</tool_call>'
    two = CALL + CALL
    rollout, _ = _rollout(tokenizer, [slow, two, CALL, CALL], tool_call_timeout=0.2, max_assistant_turns=3)
    rollout.config.multi_turn.max_tool_response_length = 5
    out = rollout.generate_sequences(_prompts(tokenizer))
    messages = out.non_tensor_batch["messages"][0]
    tools = [m["content"] for m in messages if m["role"] == "tool"]
    assert tools[0] == "Error: the call to mul did not finish within 0.2 s."  # our own messages are never cut
    assert tools[1] == "re...(truncated)...360"  # the tool's "result=360" cut to 5 characters (both ends)
    assert "only 1 tool call(s) per turn" in tools[2]
    # the third assistant turn hit max_assistant_turns: its call is not run
    assert sum(m["role"] == "assistant" for m in messages) == 3 and len(tools) == 3


class RetryInteraction(BaseInteraction):
    """Says "Try again" until the assistant's last message contains 360; its turn score is 1 or 0."""

    def __init__(self):
        super().__init__({"name": "retry"})
        self.started, self.finished = {}, []

    async def start_interaction(self, instance_id=None, **kwargs):
        self.started[instance_id] = kwargs
        return instance_id

    async def generate_response(self, instance_id, messages, **kwargs):
        right = "360" in messages[-1]["content"]
        return right, ("Correct." if right else "Try again."), float(right), {}

    async def finalize_interaction(self, instance_id, **kwargs):
        self.finished.append(instance_id)


def test_interaction_answers_until_it_ends_the_conversation(tokenizer):
    interaction = RetryInteraction()
    end = ChatTemplate(tokenizer).end_of_turn_id
    engine = ScriptedEngine(tokenizer, ["It is 350.", "It is 355.", "It is 360."], end)
    rollout = MultiTurnRollout(engine, _config(), tokenizer, tools=[], interaction=interaction)
    data = _prompts(tokenizer)
    kwargs = np.empty(1, dtype=object)
    kwargs[:] = [{"name": "retry", "ground_truth": "360"}]
    data.non_tensor_batch["interaction_kwargs"] = kwargs
    out = rollout.generate_sequences(data)
    messages = out.non_tensor_batch["messages"][0]
    assert [m["role"] for m in messages] == ["user", "assistant", "user", "assistant", "user", "assistant"]
    assert out.non_tensor_batch["reward_scores"][0] == {"user_turn_rewards": [0.0, 0.0, 1.0]}
    assert list(interaction.started.values()) == [{"name": "retry", "ground_truth": "360"}] * 2
    assert sorted(interaction.finished) == sorted(interaction.started)
    # the user turns are context: only the three assistant turns are trained on
    generated = out.batch["responses"][0][out.batch["loss_mask"][0, P:].bool()].tolist()
    assert tokenizer.decode(generated).count("It is") == 3
    # max_user_turns=1: the second wrong answer is not answered any more
    rollout.config.multi_turn.max_user_turns = 1
    out = rollout.generate_sequences(data)
    assert [m["role"] for m in out.non_tensor_batch["messages"][0]] == ["user", "assistant", "user", "assistant"]


def test_length_budget_cuts_the_trajectory(tokenizer):
    rollout, _ = _rollout(tokenizer, [CALL] * 50)
    out = rollout.generate_sequences(_prompts(tokenizer))
    assert out.batch["attention_mask"][0, P:].sum() == T  # filled to response_length, then stopped
    assert out.batch["responses"].shape == (2, T)


def test_missing_raw_prompt_and_unknown_tool_kwargs_are_refused(tokenizer):
    rollout, _ = _rollout(tokenizer, ["x"])
    data = _prompts(tokenizer)
    data.non_tensor_batch.pop("raw_prompt")
    with pytest.raises(KeyError, match="return_raw_chat=True"):
        rollout.generate_sequences(data)
    with pytest.raises(KeyError, match=r"row 0: tools_kwargs names tools \['search'\]"):
        rollout.generate_sequences(_prompts(tokenizer, tools_kwargs={"search": {}}))


def test_tools_kwargs_without_a_tool_config_are_ignored(tokenizer, caplog, monkeypatch):
    """verl's GSM8K tool data (tools_kwargs and interaction_kwargs) run with only an interaction: verl offers no
    tool and ignores the column; so does the tool agent, with one warning."""
    from verl.multi_turn.agent_loop import tool_agent

    monkeypatch.setattr(tool_agent, "_warned_unused_tools_kwargs", False)
    end = ChatTemplate(tokenizer).end_of_turn_id
    engine = ScriptedEngine(tokenizer, ["It is 360."], end)
    rollout = MultiTurnRollout(engine, _config(), tokenizer, tools=[], interaction=RetryInteraction())
    data = _prompts(tokenizer, tools_kwargs={"calc_gsm8k_reward": {"create_kwargs": {"ground_truth": "360"}}})
    with caplog.at_level(logging.WARNING, logger="verl.multi_turn.agent_loop.tool_agent"):
        out = rollout.generate_sequences(data)
    assert [m["role"] for m in out.non_tensor_batch["messages"][0]] == ["user", "assistant"]
    assert out.non_tensor_batch["reward_scores"][0] == {"user_turn_rewards": [1.0]}
    assert "defines no tools" in caplog.text


# ------------------------------------------------------------------------------------------------ real engine
def test_hf_engine_multi_turn_rows_are_consistent(tmp_path, tokenizer):
    from transformers import AutoModelForCausalLM

    from verl.workers.rollout import HFRollout

    model_dir = make_tiny_model_dir(str(tmp_path / "m"))
    torch.manual_seed(0)
    model = AutoModelForCausalLM.from_pretrained(model_dir)
    config = _config(max_assistant_turns=2)
    tok = AutoTokenizer.from_pretrained(model_dir)
    rollout = MultiTurnRollout(HFRollout(model, config), config, tok, tools=[MulTool()])
    data = _prompts(tok, rows=2)
    data.meta_info["response_length"] = 24
    out = rollout.generate_sequences(data)
    assert out.batch["input_ids"].shape == (4, P + T)
    for i in range(4):
        mask = out.batch["loss_mask"][i, P:].bool()
        real = out.batch["attention_mask"][i, P:].bool()
        assert (mask <= real).all() and 0 < mask.sum() <= 24


class SleepTool(MulTool):
    """A multiplication that takes 0.5 s (awaiting, as an HTTP tool would); records when it ran."""

    async def execute(self, instance_id, parameters, **kwargs):
        self.window = [time.perf_counter()]
        await asyncio.sleep(0.5)
        self.window.append(time.perf_counter())
        return await super().execute(instance_id, parameters, **kwargs)


class PerRowEngine(ScriptedEngine):
    """Row "12*30": one tool call, then the answer; other rows: three wrong answers for the interaction."""

    def generate_turns(self, prompts, max_tokens, request, stop_token_ids):
        self.served = getattr(self, "served", []) + [(time.perf_counter(), len(prompts))]
        turns = []
        for ids in prompts:
            seen = self.tokenizer.decode(ids)
            k = seen.count("<tool_response>") + seen.count("Try again")
            replies = [CALL, "It is 360."] if "12*30?" in seen else ["It is 1.", "It is 2.", "It is 360."]
            tokens = self.tokenizer.encode(replies[min(k, len(replies) - 1)], add_special_tokens=False)
            turns.append(GeneratedTurn(tokens + [self.end_id]))
        return turns


def test_a_slow_tool_holds_back_only_its_own_trajectory(tokenizer):
    tool = SleepTool()
    engine = PerRowEngine(tokenizer, [], ChatTemplate(tokenizer).end_of_turn_id)
    config = _config()
    config.n = 1
    rollout = MultiTurnRollout(engine, config, tokenizer, tools=[tool], interaction=RetryInteraction())
    data = _prompts(tokenizer, rows=2)  # "What is 12*30?" (the tool) and "What is 12*31?" (the interaction)
    out = rollout.generate_sequences(data)
    roles = [[m["role"] for m in out.non_tensor_batch["messages"][i]] for i in range(2)]
    assert roles[0][:4] == ["user", "assistant", "tool", "assistant"]  # then the interaction says "Correct."
    assert roles[1] == ["user", "assistant", "user", "assistant", "user", "assistant"]
    start, end = tool.window
    # the interaction's row kept generating while the tool call was running
    assert any(start < t < end and size == 1 for t, size in engine.served), (engine.served, tool.window)
    assert engine.served[0][1] == 2  # the first turns of both rows went in one call


class RecordingSink:
    """The reward loop's side of ``TRAJECTORY_SINK``: what arrived, and when."""

    def __init__(self):
        self.items = []

    def put(self, item):
        self.items.append((time.perf_counter(), *item))


def test_each_trajectory_reaches_the_reward_loop_sink_as_it_finishes(tokenizer):
    from verl.workers.rollout.base import TRAJECTORY_ID, TRAJECTORY_SINK

    engine = PerRowEngine(tokenizer, [], ChatTemplate(tokenizer).end_of_turn_id)
    rollout = MultiTurnRollout(engine, _config(), tokenizer, tools=[SleepTool()], interaction=RetryInteraction())
    data = _prompts(tokenizer, rows=2)  # row 0 waits 0.5 s on its tool, row 1 talks to the interaction
    data.non_tensor_batch[TRAJECTORY_ID] = np.array([10, 20])  # first trajectory id of each prompt (n=2)
    sink = RecordingSink()
    data.meta_info[TRAJECTORY_SINK] = sink
    out = rollout.generate_sequences(data)
    returned = time.perf_counter()

    assert sorted(int(i) for _, ids, _ in sink.items for i in ids) == [10, 11, 20, 21]
    by_id = {int(ids[0]): (arrived, rows) for arrived, ids, rows in sink.items}
    # row 1's trajectories finished (and could be scored) while row 0's tool was still running
    assert by_id[20][0] < returned - 0.3 and by_id[21][0] < returned - 0.3, (by_id[20][0], returned)
    for index, trajectory in enumerate([10, 11, 20, 21]):  # the output's rows are interleaved per prompt
        rows = by_id[trajectory][1]
        assert len(rows) == 1 and TRAJECTORY_ID not in rows.non_tensor_batch and not rows.meta_info
        for key, value in rows.batch.items():
            assert torch.equal(value[0], out.batch[key][index]), key
        for key in ("messages", "reward_scores", "data_source", "raw_prompt"):
            assert rows.non_tensor_batch[key][0] == out.non_tensor_batch[key][index], key


@pytest.mark.parametrize("mode, matches", [("strict", False), ("ignore_strippable", True), ("off", True)])
def test_tokenization_sanity_check_modes(tokenizer, mode, matches):
    from verl.multi_turn.agent_loop import AgentLoopContext, ToolAgentLoop
    from verl.multi_turn.trajectory import Trajectory

    rollout, _ = _rollout(tokenizer, ["x"], tokenization_sanity_check_mode=mode)
    context = AgentLoopContext(None, rollout.chat, rollout.config, None, [], rollout.tools)
    agent_loop = ToolAgentLoop(context)
    messages = [{"role": "user", "content": "12*30?"}, {"role": "assistant", "content": "It is 360."}]
    rendered = rollout.chat.render_ids(messages, [], add_generation_prompt=False)
    cut = rendered.index(tokenizer.encode("I", add_special_tokens=False)[0])
    ids = rendered[:cut] + tokenizer.encode(" ", add_special_tokens=False) + rendered[cut:-1]  # an extra space
    t = Trajectory(0, messages, [], {}, {}, prompt_ids=ids[:cut], response_budget=100)
    t.add_generated(ids[cut:], None)
    t.finish("stop")
    assert agent_loop.matches_template(t) is matches
    # a non-whitespace difference counts in both checking modes
    t.response_ids[-2] = tokenizer.encode("!", add_special_tokens=False)[0]
    assert agent_loop.matches_template(t) is (mode == "off")


# ------------------------------------------------------------------------------------------------ agent loops
def _agent_rows(tokenizer, names):
    data = _prompts(tokenizer, rows=len(names))
    column = np.empty(len(names), dtype=object)
    column[:] = names
    data.non_tensor_batch["agent_name"] = column
    return data


def test_rows_play_the_agent_loop_they_name_including_one_from_a_config_file(tokenizer, tmp_path):
    loops = tmp_path / "loops.yaml"
    loops.write_text("- name: echo_agent\n  _target_: tests.multi_turn.agent_loops_for_tests.EchoAgentLoop\n")
    end = ChatTemplate(tokenizer).end_of_turn_id
    engine = ScriptedEngine(tokenizer, [CALL, "The answer is 360."], end)
    config = _config()
    config.agent.agent_loop_config_path = str(loops)
    rollout = MultiTurnRollout(engine, config, tokenizer, tools=[MulTool()])
    out = rollout.generate_sequences(_agent_rows(tokenizer, ["tool_agent", "single_turn_agent", "echo_agent"]))
    roles = [[m["role"] for m in out.non_tensor_batch["messages"][i]] for i in range(6)]
    assert roles[0] == roles[1] == ["user", "assistant", "tool", "assistant"]  # n=2 samples of the tool row
    assert roles[2] == roles[3] == ["user", "assistant"]  # one turn, the tool call left as text
    assert roles[4] == ["user", "assistant"] and out.non_tensor_batch["messages"][4][1]["content"] == "echo"
    assert pop_agent_loop_metrics(out)["agent_loop/echo_rows"] == 1.0  # averaged over the rows that report it
    # the single-turn row's prompt has no tool schemas: shorter than the tool row's
    lengths = out.batch["attention_mask"][:, :P].sum(-1).tolist()
    assert lengths[2] < lengths[0]
    assert out.batch["loss_mask"][2, P:].sum() == out.batch["attention_mask"][2, P:].sum()  # every token generated
    with pytest.raises(KeyError, match=r"row 1: agent_name='react' is not a registered agent loop"):
        rollout.generate_sequences(_agent_rows(tokenizer, ["tool_agent", "react"]))


def test_a_failing_agent_loop_fails_the_call_and_leaves_no_trajectory_running(tokenizer):
    from verl.multi_turn.agent_loop import AgentLoopBase, register

    @register("raising_agent")
    class RaisingAgentLoop(AgentLoopBase):
        async def run(self, **kwargs):
            await asyncio.sleep(0.05)
            raise RuntimeError("environment crashed")

    rollout, engine = _rollout(tokenizer, [CALL, "The answer is 360."])
    with pytest.raises(RuntimeError, match="environment crashed"):
        rollout.generate_sequences(_agent_rows(tokenizer, ["tool_agent", "raising_agent"]))
    # only the shared batcher's serving task is left (it serves every call): no trajectory
    assert [task for task in asyncio.all_tasks(rollout._loop) if not task.done()] == [rollout._serving]
    out = rollout.generate_sequences(_agent_rows(tokenizer, ["tool_agent"]))  # the rollout still works
    assert len(out) == 2


def test_a_user_loop_returning_an_oversize_prompt_is_refused_naming_the_row(tokenizer):
    from verl.multi_turn.agent_loop import AgentLoopBase, AgentLoopOutput, register

    @register("oversize_prompt_agent")
    class OversizePromptLoop(AgentLoopBase):  # skips checked_prompt: the runner checks again
        async def run(self, **kwargs):
            too_long = [0] * (self.context.config.prompt_length + 1)
            return AgentLoopOutput(prompt_ids=too_long, response_ids=[1], response_mask=[1], num_turns=1)

    rollout, _ = _rollout(tokenizer, [CALL, "The answer is 360."])
    with pytest.raises(ValueError, match=r"row 1: the prompt \(OversizePromptLoop.*more than rollout.prompt_length"):
        rollout.generate_sequences(_agent_rows(tokenizer, ["tool_agent", "oversize_prompt_agent"]))


def test_async_single_turn_agent_on_hf_equals_the_sync_rollout_greedy(tmp_path):
    """mode=async, rows without agent_name: the single-turn loop (turns batched on the HF engine) gives the same
    greedy responses as the plain sync HF rollout on the dataset's prompt ids."""
    from transformers import AutoModelForCausalLM

    from verl.utils.model import compute_position_id_with_mask
    from verl.workers.rollout import HFRollout

    model_dir = make_tiny_model_dir(str(tmp_path / "m"))
    model = AutoModelForCausalLM.from_pretrained(model_dir).eval()
    tok = AutoTokenizer.from_pretrained(model_dir)
    config = RolloutConfig.from_config(
        OmegaConf.create({"name": "hf", "mode": "async", "prompt_length": 48, "response_length": 12, "n": 1})
    )
    messages = [[{"role": "user", "content": f"What is {i}+{i}?"}] for i in range(3)]
    # as RLHFDataset builds them: the template's text, then the ids
    texts = [tok.apply_chat_template(m, add_generation_prompt=True, tokenize=False) for m in messages]
    ids = [tok.encode(text, add_special_tokens=False) for text in texts]
    width = config.prompt_length
    input_ids = torch.tensor([[tok.pad_token_id] * (width - len(x)) + x for x in ids])
    mask = torch.tensor([[0] * (width - len(x)) + [1] * len(x) for x in ids])
    raw = np.empty(3, dtype=object)
    raw[:] = messages
    end_of_turn = ChatTemplate(tok).end_of_turn_id
    meta = {"eos_token_id": end_of_turn, "pad_token_id": tok.pad_token_id, "do_sample": False}
    data = DataProto.from_dict(
        tensors={"input_ids": input_ids, "attention_mask": mask, "position_ids": compute_position_id_with_mask(mask)},
        non_tensors={"raw_prompt": raw},
        meta_info=meta,
    )
    sync = HFRollout(model, config).generate_sequences(data)
    agent = MultiTurnRollout(HFRollout(model, config), config, tok)
    assert not agent.continuous and agent.default_agent == "single_turn_agent"
    out = agent.generate_sequences(data)
    assert torch.equal(out.batch["prompts"], sync.batch["prompts"])
    real = sync.batch["attention_mask"][:, width:].bool()
    assert torch.equal(out.batch["attention_mask"][:, width:].bool(), real)
    assert torch.equal(out.batch["responses"][real], sync.batch["responses"][real])
    assert torch.equal(out.batch["loss_mask"][:, width:].bool(), real)  # every response token was generated


def test_agent_loops_read_the_lent_row_columns_which_the_output_leaves_out(tokenizer, tmp_path):
    from tests.multi_turn.agent_loops_for_tests import EchoAgentLoop
    from verl.trainer.ppo.validation import pop_generation_inputs

    loops = tmp_path / "loops.yaml"
    loops.write_text("- name: echo_agent\n  _target_: tests.multi_turn.agent_loops_for_tests.EchoAgentLoop\n")
    config = _config()
    config.agent.agent_loop_config_path = str(loops)
    config.agent.default_agent_loop = "echo_agent"
    rollout = MultiTurnRollout(ScriptedEngine(tokenizer, ["x"], 0), config, tokenizer, tools=[MulTool()])
    batch = _prompts(tokenizer, rows=2)  # raw_prompt and data_source
    extra = np.empty(2, dtype=object)
    extra[:] = [{"answer": "360"}, {"answer": "372"}]
    batch.non_tensor_batch["extra_info"] = extra
    batch.batch["attention_mask"] = torch.ones_like(batch.batch["input_ids"])
    batch.batch["position_ids"] = torch.zeros_like(batch.batch["input_ids"])
    gen = pop_generation_inputs(batch, row_context=True)
    assert sorted(gen.meta_info["row_context_keys"]) == ["data_source", "extra_info"]
    assert sorted(batch.non_tensor_batch) == ["data_source", "extra_info"]  # lent, not popped
    gen.meta_info.update({"eos_token_id": tokenizer.eos_token_id, "pad_token_id": tokenizer.pad_token_id})
    EchoAgentLoop.seen_fields.clear()
    out = rollout.generate_sequences(gen)
    answers = sorted(fields["extra_info"]["answer"] for fields in EchoAgentLoop.seen_fields)
    assert answers == ["360", "360", "372", "372"]  # n=2 trajectories per row, each saw its row's extra_info
    assert "extra_info" not in out.non_tensor_batch and "data_source" not in out.non_tensor_batch
    batch.repeat(2, interleave=True).union(out)  # the trainer's merge: no clash over the lent columns
    assert "raw_prompt" in out.non_tensor_batch


class SharedEngine(ScriptedEngine):
    """A tool call then the answer, recording each engine call's rows and how they sample (greedy or not)."""

    def generate_turns(self, prompts, max_tokens, request, stop_token_ids):
        self.served = getattr(self, "served", []) + [(len(prompts), request.do_sample)]
        return super().generate_turns(prompts, max_tokens, request, stop_token_ids)


def test_concurrent_calls_share_engine_calls_by_sampling_and_return_what_lone_calls_do(tokenizer):
    """Two calls from two threads (the fully async Rollouter's mini-batches in flight) and a greedy one (a validation
    beside them): their turns meet in the engine, one call per way of sampling, and each call gets its own rows."""
    import threading

    tool = MulTool()
    engine = SharedEngine(tokenizer, [CALL, "The answer is 360."], ChatTemplate(tokenizer).end_of_turn_id)
    rollout = MultiTurnRollout(engine, _config(), tokenizer, tools=[tool])
    alone = rollout.generate_sequences(_prompts(tokenizer, rows=2))
    # the loop is held busy until the three calls have all been handed to it, so their first turns are waiting
    # together when it is free (not a race between threads and a timer)
    loop, release = rollout._event_loop(), threading.Event()
    loop.call_soon_threadsafe(release.wait)
    engine.served = []
    calls = [_prompts(tokenizer, rows=2), _prompts(tokenizer, rows=3), _prompts(tokenizer, rows=1)]
    calls[2].meta_info["do_sample"] = False  # greedy: one sample per prompt, never batched with sampled turns
    outputs = [None] * 3
    threads = [
        threading.Thread(target=lambda i=i: outputs.__setitem__(i, rollout.generate_sequences(calls[i])))
        for i in range(3)
    ]
    for thread in threads:
        thread.start()
    deadline = time.monotonic() + 30
    while len(loop._ready) < 3 and time.monotonic() < deadline:  # the calls' coroutines, scheduled on the held loop
        time.sleep(0.01)
    release.set()
    for thread in threads:
        thread.join(30)
    assert [len(out) for out in outputs] == [4, 6, 1]
    assert torch.equal(outputs[0].batch["responses"], alone.batch["responses"])
    sampled = [rows for rows, do_sample in engine.served if do_sample]
    greedy = [rows for rows, do_sample in engine.served if not do_sample]
    # 10 sampled trajectories x 2 turns, 1 greedy x 2 turns; the sampled calls' turns went in shared engine calls
    assert sum(sampled) == 20 and sum(greedy) == 2
    # at least once the sampled turns of both calls (4 + 6 trajectories) went in one engine call
    assert max(sampled) == 10, engine.served
    for out in outputs:  # each call counts the engine calls that served its own trajectories
        assert pop_agent_loop_metrics(out)["multi_turn/engine_calls"] >= 2


class ServingEngine(ScriptedEngine):
    """A scripted engine that also serves single requests (as vLLM's ``turn_server``), which this test refuses."""

    gate = None

    def turn_server(self, request, stop_token_ids):
        raise RuntimeError("turn_server called")


def test_async_mode_batches_turns_while_a_weight_gate_may_pause_them(tokenizer):
    """``rollout.mode=async`` serves turns one request at a time through the engine's ``turn_server``, which a
    weight load cannot pause; with a WeightGate on the engine (partial rollout) the turns go through the batched,
    pausable ``generate_turns`` instead."""
    from verl.workers.rollout.weight_gate import WeightGate

    end = ChatTemplate(tokenizer).end_of_turn_id
    config = RolloutConfig.from_config(OmegaConf.create({**_config().to_dict(), "mode": "async"}))
    engine = ServingEngine(tokenizer, [CALL, "The answer is 360."], end)
    rollout = MultiTurnRollout(engine, config, tokenizer, tools=[MulTool()])
    assert rollout.continuous
    with pytest.raises(RuntimeError, match="turn_server called"):
        rollout.generate_sequences(_prompts(tokenizer))
    engine.gate = WeightGate(version=0)
    out = rollout.generate_sequences(_prompts(tokenizer))
    assert len(out) == 2 and engine.calls == 2
