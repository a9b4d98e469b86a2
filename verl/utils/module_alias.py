"""verl's old import paths for packages that live elsewhere here, with one module object per module.

A compat package (``verl/tools/__init__.py`` for instance) is one call::

    alias_package(__name__, "verl.multi_turn.tools")

From then on ``verl.tools`` *is* ``verl.multi_turn.tools`` (the same module object in ``sys.modules``), and every
submodule path under it, imported in any way (``import``, ``from ... import``, ``importlib.import_module``, a tool
config's ``class_name``, an unpickler), gives the module object of its new home. So ``isinstance`` checks, registries
and class identity hold whichever path a user imports, and nothing is loaded twice. Submodules keep their names unless
``renames`` maps one (``{"agent_loop": "base"}``: ``<alias>.agent_loop`` is ``<target>.base``).

Classes report their new module (``__module__``), so pickles written here name the new path; pickles that name the old
path still load through the alias.
"""

from __future__ import annotations

import importlib
import importlib.abc
import importlib.machinery
import importlib.util
import sys
import threading

__all__ = ["alias_package"]


class _AliasLoader(importlib.abc.Loader):
    """Loads an alias name by importing its target and putting the target's module under the alias name."""

    def __init__(self, target: str):
        self.target = target

    def create_module(self, spec):
        return None  # a throw-away module: the import system overwrites __spec__ on whatever is returned here

    def exec_module(self, module) -> None:
        # The import system returns what sys.modules holds after exec_module, so the alias name ends up bound to the
        # target's module object (its __spec__ and __name__ untouched).
        sys.modules[module.__name__] = importlib.import_module(self.target)


class _AliasFinder(importlib.abc.MetaPathFinder):
    """Maps ``alias.sub.mod`` names to ``target.sub.mod`` (after ``renames``) for every registered alias package."""

    def __init__(self):
        self.packages: dict[str, tuple[str, dict[str, str]]] = {}

    def target_of(self, fullname: str) -> str | None:
        for alias, (target, renames) in self.packages.items():
            if fullname.startswith(alias + "."):
                rest = fullname[len(alias) + 1 :]
                head, dot, tail = rest.partition(".")
                return f"{target}.{renames.get(head, head)}{dot}{tail}"
        return None

    def find_spec(self, fullname, path=None, target=None):
        new_name = self.target_of(fullname)
        if new_name is None:
            return None
        if importlib.util.find_spec(new_name) is None:
            return None  # let the import fail with the usual ModuleNotFoundError for the alias name
        return importlib.machinery.ModuleSpec(fullname, _AliasLoader(new_name))


_FINDER = _AliasFinder()
_LOCK = threading.Lock()


def alias_package(alias: str, target: str, renames: dict[str, str] | None = None) -> None:
    """Make ``alias`` and every ``alias.<sub>`` module the same objects as ``target`` and ``target.<sub>``.

    Call it from the alias package's ``__init__`` (``alias == __name__``): it replaces that package in
    ``sys.modules`` by the target package, so the ``import alias`` in progress returns the target. ``renames`` maps
    first-level submodule names of the alias to the target's (only where the target renamed a module).
    """
    with _LOCK:
        _FINDER.packages[alias] = (target, dict(renames or {}))
        if _FINDER not in sys.meta_path:
            # First, ahead of the path finder: that one would find the target's files through the target package's
            # __path__ and load them a second time under the alias name.
            sys.meta_path.insert(0, _FINDER)
    package = importlib.import_module(target)
    sys.modules[alias] = package
    parent, _, child = alias.rpartition(".")
    if parent and parent in sys.modules:
        setattr(sys.modules[parent], child, package)
