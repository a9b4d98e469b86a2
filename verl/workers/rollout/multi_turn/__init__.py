"""Multi-turn rollouts: tool calls and interactions over several assistant turns (``rollout.multi_turn``)."""

from verl.workers.rollout.multi_turn.rollout import GeneratedTurn, MultiTurnRollout, TurnEngine
from verl.workers.rollout.multi_turn.tool_parser import get_tool_parser, register_tool_parser

__all__ = ["GeneratedTurn", "MultiTurnRollout", "TurnEngine", "get_tool_parser", "register_tool_parser"]
