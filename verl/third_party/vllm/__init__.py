"""verl's path to the vLLM engine: ``LLM``, ``parallel_state`` and ``vllm_version``.

``vllm_version`` is the installed vLLM's version string (None without vLLM) and is read without importing vLLM.
``LLM`` and ``parallel_state`` import vLLM on first use; without it they raise an ImportError that names the extra
to install.
"""

from __future__ import annotations

from typing import Any

from verl.utils.vllm_utils import import_vllm, vllm_package_version

__all__ = ["LLM", "parallel_state", "vllm_version"]

vllm_version: str | None = vllm_package_version()

# attribute -> (vLLM module, attribute of it or None for the module itself)
_LAZY = {"LLM": ("vllm", "LLM"), "parallel_state": ("vllm.distributed.parallel_state", None)}


def __getattr__(name: str) -> Any:
    if name not in _LAZY:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    module_name, attribute = _LAZY[name]
    module = import_vllm(module_name, needed_for=f"verl.third_party.vllm.{name}")
    value = module if attribute is None else getattr(module, attribute)
    globals()[name] = value  # later lookups skip __getattr__
    return value
