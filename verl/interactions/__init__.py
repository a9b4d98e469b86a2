"""verl's import path for interactions (``verl.interactions``, ``verl.interactions.base``, ...).

The interactions live in ``verl.multi_turn.interactions``; this package is that package under verl's name, module
for module (one module object per module, see ``verl.utils.module_alias``).
"""

from verl.utils.module_alias import alias_package

alias_package(__name__, "verl.multi_turn.interactions")
