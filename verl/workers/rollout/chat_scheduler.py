"""verl's import path ``verl.workers.rollout.chat_scheduler`` (verl 0.4: ``ChatCompletionScheduler`` spreading OpenAI
chat requests over the async servers, and the ``CompletionCallback`` that decides follow-up turns). Turns are not
OpenAI chat completions here, so importing it fails and says what to use instead."""

raise ImportError(
    "verl.workers.rollout.chat_scheduler (CompletionCallback, ToolCompletionCallback, ChatCompletionScheduler) does "
    "not exist here: multi-turn turns are played by agent loops in the rollout workers, not scheduled as OpenAI chat "
    "completions. Tool calling is the tool_agent loop (verl.multi_turn.agent_loop.tool_agent.ToolAgentLoop) with "
    "actor_rollout_ref.rollout.multi_turn.enable=True, multi_turn.tool_config_path and multi_turn.format; instead of "
    "a multi_turn.completion_callback, subclass verl.experimental.agent_loop.AgentLoopBase and register it with "
    "actor_rollout_ref.rollout.agent.agent_loop_config_path (rows pick it by agent_name). See docs/multiturn.md.",
    name=__name__,
)
