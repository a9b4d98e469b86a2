"""Tools a model calls during multi-turn rollouts (``actor_rollout_ref.rollout.multi_turn.tool_config_path``)."""

from verl.multi_turn.tools.base_tool import BaseTool, initialize_tools_from_config

__all__ = ["BaseTool", "initialize_tools_from_config"]
