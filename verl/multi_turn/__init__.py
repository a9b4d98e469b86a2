"""Multi-turn rollouts: agent loops (tool calls, interactions) over several assistant turns (``rollout.multi_turn``,
``rollout.mode=async``).

* ``rollout``: ``AgentLoopRollout``, the rollout that plays every trajectory as its own coroutine over an engine;
* ``turn_engine`` / ``turn_batcher``: what a loop needs from an engine (one assistant turn) and the batcher serving
  the loops' turns in shared engine calls; ``chat_template``: a conversation's token ids as the template gives them;
  ``trajectory``: one growing trajectory and its loss mask; ``tool_parser``: tool calls found in the model's text;
* ``agent_loop``: the agent loops and their registry (verl's ``verl.experimental.agent_loop``);
* ``tools`` and ``interactions``: the plug-ins the loops call (verl's ``verl.tools`` and ``verl.interactions``).

verl's import paths for the last three are aliases of these packages (``verl.utils.module_alias``).
"""

from verl.multi_turn.rollout import AgentLoopRollout, MultiTurnRollout
from verl.multi_turn.tool_parser import get_tool_parser, register_tool_parser
from verl.multi_turn.turn_engine import GeneratedTurn, TurnEngine

__all__ = [
    "AgentLoopRollout",
    "GeneratedTurn",
    "MultiTurnRollout",
    "TurnEngine",
    "get_tool_parser",
    "register_tool_parser",
]
