"""Optional-dependency probes and loading user code from files."""

import functools
import importlib
import importlib.util
import os
import sys
import warnings


def _has_module(name: str) -> bool:
    try:
        return importlib.util.find_spec(name) is not None
    except (ImportError, ValueError):
        return False


@functools.cache
def is_megatron_core_available() -> bool:
    return _has_module("megatron.core")


@functools.cache
def is_vllm_available() -> bool:
    return _has_module("vllm")


@functools.cache
def is_sglang_available() -> bool:
    return _has_module("sglang")


@functools.cache
def is_nvtx_available() -> bool:
    return _has_module("nvtx")


@functools.cache
def is_trl_available() -> bool:
    return _has_module("trl")


def import_external_libs(external_libs=None) -> None:
    """Import user modules (e.g. ones that register custom models) named in config."""
    if external_libs is None:
        return
    if isinstance(external_libs, str):
        external_libs = [external_libs]
    for lib in external_libs:
        importlib.import_module(lib)


def load_extern_type(file_path: str | None, type_name: str | None):
    """Load ``type_name`` (a class or function) from a Python file or an importable module path."""
    if not file_path:
        return None
    if file_path.startswith("pkg://"):
        module = importlib.import_module(file_path[len("pkg://") :].replace("/", "."))
    else:
        if not os.path.exists(file_path):
            raise FileNotFoundError(f"Custom type file '{file_path}' not found")
        module_name = f"verl_extern_{abs(hash(os.path.abspath(file_path)))}"
        spec = importlib.util.spec_from_file_location(module_name, file_path)
        module = importlib.util.module_from_spec(spec)
        sys.modules[module_name] = module
        try:
            spec.loader.exec_module(module)
        except Exception as exc:
            del sys.modules[module_name]
            raise RuntimeError(f"Error loading module from '{file_path}': {exc}") from exc
    if not hasattr(module, type_name):
        raise AttributeError(f"Custom type '{type_name}' not found in '{file_path}'")
    return getattr(module, type_name)


def deprecated(replacement: str = ""):
    """Decorator that warns once per call site that a function or class is deprecated."""

    def decorator(obj):
        message = f"{obj.__name__} is deprecated" + (f"; use {replacement} instead" if replacement else "")

        if isinstance(obj, type):
            original_init = obj.__init__

            @functools.wraps(original_init)
            def init(self, *args, **kwargs):
                warnings.warn(message, DeprecationWarning, stacklevel=2)
                original_init(self, *args, **kwargs)

            obj.__init__ = init
            return obj

        @functools.wraps(obj)
        def wrapper(*args, **kwargs):
            warnings.warn(message, DeprecationWarning, stacklevel=2)
            return obj(*args, **kwargs)

        return wrapper

    return decorator


def load_class_by_name(class_name: str, where: str):
    """The object named by a dotted ``module.Class`` path; ``where`` (e.g. "tools[0].class_name in tools.yaml")
    goes into the error so a bad config entry is found at once."""
    if not isinstance(class_name, str) or "." not in class_name:
        raise ValueError(f"{where}: expected 'module.Class', got {class_name!r}")
    module_name, attr = class_name.rsplit(".", 1)
    try:
        module = sys.modules.get(module_name) or importlib.import_module(module_name)
    except ModuleNotFoundError as exc:  # kept a ModuleNotFoundError, as verl raises for a module that is not there
        raise ModuleNotFoundError(f"{where}: cannot import module {module_name!r} ({exc})", name=exc.name) from exc
    except ImportError as exc:
        raise ImportError(f"{where}: cannot import module {module_name!r} ({exc})") from exc
    if not hasattr(module, attr):
        raise ImportError(f"{where}: module {module_name!r} has no {attr!r}")
    return getattr(module, attr)
