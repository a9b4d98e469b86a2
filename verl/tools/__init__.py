"""verl's import path for tools (``verl.tools``, ``verl.tools.base_tool``, ``verl.tools.gsm8k_tool``, ...).

The tools live in ``verl.multi_turn.tools``; this package is that package under verl's name, module for module (one
module object per module, see ``verl.utils.module_alias``), so a tool config naming ``verl.tools.gsm8k_tool.Gsm8kTool``
loads the same class as ``verl.multi_turn.tools.gsm8k_tool.Gsm8kTool``.
"""

from verl.utils.module_alias import alias_package

alias_package(__name__, "verl.multi_turn.tools")
