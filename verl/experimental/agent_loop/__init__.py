"""verl's import path for the agent loops (``verl.experimental.agent_loop`` and its submodules).

The agent loops live in ``verl.multi_turn.agent_loop``; this package is that package under verl's name, module for
module (one module object per module, see ``verl.utils.module_alias``). verl's submodule names map to ours:
``agent_loop`` -> ``base``, ``single_turn_agent_loop`` -> ``single_turn``, ``tool_agent_loop`` -> ``tool_agent``.
"""

from verl.utils.module_alias import alias_package

alias_package(
    __name__,
    "verl.multi_turn.agent_loop",
    renames={"agent_loop": "base", "single_turn_agent_loop": "single_turn", "tool_agent_loop": "tool_agent"},
)
