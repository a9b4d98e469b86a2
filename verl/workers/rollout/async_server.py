"""verl's import path ``verl.workers.rollout.async_server`` (verl 0.4: an OpenAI-compatible chat server per rollout
replica, ``AsyncLLMServerManager`` starting them, ``async_server_class``). Nothing here serves that role, so
importing it fails and says what to use instead."""

raise ImportError(
    "verl.workers.rollout.async_server (AsyncServerBase, AsyncLLMServerManager, async_server_class) does not exist "
    "here: no OpenAI chat server runs per rollout replica. With actor_rollout_ref.rollout.mode=async the rollout "
    "workers play agent loops themselves (verl.multi_turn.AgentLoopRollout; vLLM serves each turn from its running "
    "batch, the HF engine batches the turns that are ready). Pick the loop with "
    "actor_rollout_ref.rollout.agent.default_agent_loop or a row's agent_name; add yours (a subclass of "
    "verl.experimental.agent_loop.AgentLoopBase) with actor_rollout_ref.rollout.agent.agent_loop_config_path. "
    "See docs/multiturn.md.",
    name=__name__,
)
