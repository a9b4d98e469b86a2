"""Load a script of ``scripts/benchmark`` as a module, for the tests of its helpers (the scripts are not a package)."""

import importlib.util
import os
from types import ModuleType

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def load_benchmark(name: str) -> ModuleType:
    """``scripts/benchmark/<name>.py``, executed as a fresh module named ``name``."""
    spec = importlib.util.spec_from_file_location(name, os.path.join(ROOT, "scripts", "benchmark", f"{name}.py"))
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module
