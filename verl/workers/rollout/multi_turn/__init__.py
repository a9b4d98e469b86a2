"""Multi-turn rollouts: agent loops (tool calls, interactions) over several assistant turns (``rollout.multi_turn``,
``rollout.mode=async``)."""

from verl.workers.rollout.multi_turn.engine import GeneratedTurn, TurnEngine
from verl.workers.rollout.multi_turn.rollout import AgentLoopRollout, MultiTurnRollout
from verl.workers.rollout.multi_turn.tool_parser import get_tool_parser, register_tool_parser

__all__ = [
    "AgentLoopRollout",
    "GeneratedTurn",
    "MultiTurnRollout",
    "TurnEngine",
    "get_tool_parser",
    "register_tool_parser",
]
