"""verl's rollout-side multi-turn paths: ``schemas`` gives verl's request schemas over our trajectories;
``async_server`` and ``chat_scheduler`` (no counterpart here) fail at import and name what to use instead."""

import importlib
import sys

import pytest

from verl.multi_turn.trajectory import Trajectory

SCHEMA = {
    "type": "function",
    "function": {
        "name": "calc",
        "description": "adds",
        "parameters": {"type": "object", "properties": {"a": {"type": "integer"}}, "required": ["a"]},
    },
}


def test_schemas_is_verls_path_of_our_request_schemas():
    import verl.multi_turn.request_schemas as ours
    import verl.workers.rollout.schemas as schemas

    for name in ("AsyncRolloutRequest", "AsyncRolloutRequestStateEnum", "FinishReasonTypeEnum", "Message"):
        assert getattr(schemas, name) is getattr(ours, name)


def test_enums_have_verls_members():
    from verl.workers.rollout.schemas import AsyncRolloutRequestStateEnum, FinishReasonTypeEnum

    assert [m.name for m in AsyncRolloutRequestStateEnum] == [
        "PENDING",
        "RUNNING",
        "COMPLETED",
        "FAILED",
        "TOOL_CALLING",
        "INTERACTING",
    ]
    assert FinishReasonTypeEnum.from_str("stop") is FinishReasonTypeEnum.STOP
    assert FinishReasonTypeEnum.from_str("length") is FinishReasonTypeEnum.LENGTH
    assert FinishReasonTypeEnum.from_str("tool_calls") is FinishReasonTypeEnum.TOOL_CALL
    with pytest.raises(ValueError, match="unknown finish reason 'abort'"):
        FinishReasonTypeEnum.from_str("abort")


def test_message_validates_tool_calls():
    from verl.workers.rollout.schemas import Message

    msg = Message.model_validate(
        {
            "role": "assistant",
            "content": "",
            "tool_calls": [{"id": "c0", "function": {"name": "calc", "arguments": {"a": 1}}}],
        }
    )
    assert msg.tool_calls[0].function.arguments == {"a": 1} and msg.tool_calls[0].type == "function"
    assert Message(role="user", content="hi").tool_calls is None
    with pytest.raises(ValueError):
        Message.model_validate({"role": "tool"})  # no content


def _trajectory() -> Trajectory:
    return Trajectory(
        row=0,
        messages=[{"role": "user", "content": "1+1?"}],
        tool_schemas=[SCHEMA],
        tools_kwargs={"calc": {"create_kwargs": {"ground_truth": "2"}}},
        interaction_kwargs={},
        prompt_ids=[5, 6, 7],
        response_budget=16,
    )


def test_request_records_a_trajectory_as_verl_names_it():
    from verl.workers.rollout.schemas import AsyncRolloutRequest, AsyncRolloutRequestStateEnum

    t = _trajectory()
    assert AsyncRolloutRequest.from_trajectory(t).state is AsyncRolloutRequestStateEnum.PENDING
    t.add_generated([10, 11], [-0.1, -0.2])  # an assistant turn with a tool call
    t.assistant_turns += 1
    t.messages.append({"role": "assistant", "content": "<tool_call>...</tool_call>"})
    t.add_context([20, 21, 22])  # the tool's answer and the next generation prompt
    t.messages.append({"role": "tool", "content": "2"})
    running = AsyncRolloutRequest.from_trajectory(t)
    assert running.state is AsyncRolloutRequestStateEnum.RUNNING and running.stop_reason == ""
    t.add_generated([12], [-0.3])
    t.assistant_turns += 1
    t.tool_rewards["calc"] = 1.0
    t.turn_scores.append(0.5)
    t.finish("stop")

    req = AsyncRolloutRequest.from_trajectory(t)
    assert req.state is AsyncRolloutRequestStateEnum.COMPLETED and req.stop_reason == "stop"
    assert req.request_id == t.request_id
    assert req.prompt_ids == [5, 6, 7] and req.response_ids == [10, 11, 20, 21, 22, 12]
    assert req.input_ids == [5, 6, 7, 10, 11, 20, 21, 22, 12]
    assert req.response_loss_mask == [1, 1, 0, 0, 0, 1]
    assert req.prompt_loss_mask == [0, 0, 0] and req.loss_mask == [0, 0, 0, 1, 1, 0, 0, 0, 1]
    assert [m.role for m in req.messages] == ["user", "assistant", "tool"]
    assert req.tool_schemas[0].function.name == "calc"
    assert req.tools_kwargs == {"calc": {"create_kwargs": {"ground_truth": "2"}}}
    assert req.reward_scores == {"calc": 1.0, "user_turn_rewards": [0.5]}
    assert req.max_response_len == 16
    assert AsyncRolloutRequest.model_validate(req.model_dump()) == req  # a plain pydantic record


@pytest.mark.parametrize(
    "path, names, instead",
    [
        (
            "verl.workers.rollout.async_server",
            ("AsyncServerBase", "AsyncLLMServerManager", "async_server_class"),
            ("rollout.mode=async", "verl.multi_turn.AgentLoopRollout", "rollout.agent.agent_loop_config_path"),
        ),
        (
            "verl.workers.rollout.chat_scheduler",
            ("CompletionCallback", "ToolCompletionCallback", "ChatCompletionScheduler"),
            ("ToolAgentLoop", "multi_turn.tool_config_path", "completion_callback", "agent.agent_loop_config_path"),
        ),
    ],
)
def test_paths_without_a_counterpart_fail_at_import_naming_what_to_use(path, names, instead):
    with pytest.raises(ImportError) as err:
        importlib.import_module(path)
    assert err.value.name == path
    for text in (path, *names, *instead):
        assert text in str(err.value)
    assert path not in sys.modules  # a second import fails the same way, nothing half-loaded stays behind
    with pytest.raises(ImportError):
        importlib.import_module(path)
