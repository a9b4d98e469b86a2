"""Agent loops (verl >= 0.5): one coroutine per trajectory, selected per data row by ``agent_name``.

Built in: ``single_turn_agent`` and ``tool_agent``. Add your own with ``@register("name")`` on an
``AgentLoopBase`` subclass, or list it in the file ``rollout.agent.agent_loop_config_path`` names.
"""

from verl.multi_turn.agent_loop.base import (
    AgentLoopBase,
    AgentLoopContext,
    AgentLoopOutput,
    get_agent_loop_class,
    load_agent_loop_config,
    read_agent_loop_config,
    register,
    registered_agent_loops,
)
from verl.multi_turn.agent_loop.single_turn import SingleTurnAgentLoop
from verl.multi_turn.agent_loop.tool_agent import ToolAgentLoop

__all__ = [
    "AgentLoopBase",
    "AgentLoopContext",
    "AgentLoopOutput",
    "SingleTurnAgentLoop",
    "ToolAgentLoop",
    "get_agent_loop_class",
    "load_agent_loop_config",
    "read_agent_loop_config",
    "register",
    "registered_agent_loops",
]
