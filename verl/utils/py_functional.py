"""Small pure-Python helpers shared across layers."""

from __future__ import annotations

import functools
import multiprocessing
import queue
import signal
import threading
from types import SimpleNamespace
from typing import Any


def union_two_dict(dict1: dict, dict2: dict) -> dict:
    """Merge ``dict2`` into ``dict1`` (in place); a key present in both must hold equal values."""
    for key, val in dict2.items():
        if key in dict1:
            assert dict1[key] == val, f"union_two_dict: key '{key}' has different values: {dict1[key]!r} vs {val!r}"
        dict1[key] = val
    return dict1


def append_to_dict(data: dict, new_data: dict) -> None:
    """Append each value of ``new_data`` to the list kept under the same key in ``data``."""
    for key, val in new_data.items():
        data.setdefault(key, []).append(val)


def as_list(value) -> list:
    """A list from one value or a sequence: a str becomes ``[str]``, None ``[]``, a list/tuple/ListConfig a list."""
    if value is None:
        return []
    if isinstance(value, str):
        return [value]
    return list(value)


def list_of_dict_to_dict_of_list(list_of_dict: list[dict]) -> dict:
    """[{a: 1, b: 2}, {a: 3, b: 4}] -> {a: [1, 3], b: [2, 4]}; every dict must have the first one's keys."""
    if len(list_of_dict) == 0:
        return {}
    keys = list_of_dict[0].keys()
    out: dict[str, list] = {key: [] for key in keys}
    for item in list_of_dict:
        for key in keys:
            out[key].append(item[key])
    return out


class NestedNamespace(SimpleNamespace):
    """A namespace whose dict values become namespaces too (attribute access into nested config dicts)."""

    def __init__(self, dictionary: dict, **kwargs):
        super().__init__(**kwargs)
        for key, value in dictionary.items():
            setattr(self, key, NestedNamespace(value) if isinstance(value, dict) else value)


class DynamicEnumMeta(type):
    """Metaclass giving enum-like iteration, membership and item access to a registry of members."""

    def __iter__(cls):
        return iter(cls._registry.values())

    def __contains__(cls, item) -> bool:
        if isinstance(item, str):
            return item.upper() in cls._registry
        return item in cls._registry.values()

    def __getitem__(cls, name: str):
        return cls._registry[name.upper()]

    def names(cls) -> list[str]:
        return list(cls._registry.keys())

    def values(cls) -> list:
        return list(cls._registry.values())


class DynamicEnum(metaclass=DynamicEnumMeta):
    """An enum that can gain members at run time (``Dispatch.register("MY_MODE")``).

    Members pickle by name, so a member created on the driver is the same object after a Ray round trip.
    """

    _registry: dict[str, DynamicEnum] = {}
    _next_value: int = 0

    def __init__(self, name: str, value: int):
        self.name = name
        self.value = value

    def __init_subclass__(cls, **kwargs):
        super().__init_subclass__(**kwargs)
        cls._registry = {}
        cls._next_value = 0

    def __repr__(self) -> str:
        return f"<{type(self).__name__}.{self.name}: {self.value}>"

    def __reduce__(self):
        return _resolve_dynamic_enum_member, (type(self).__module__, type(self).__name__, self.name)

    @classmethod
    def register(cls, name: str) -> DynamicEnum:
        """Add a member; raises ValueError if the name is taken."""
        key = name.upper()
        if key in cls._registry:
            raise ValueError(f"{cls.__name__} already has a member named {key}")
        member = cls(key, cls._next_value)
        cls._next_value += 1
        cls._registry[key] = member
        setattr(cls, key, member)
        return member

    @classmethod
    def remove(cls, name: str) -> DynamicEnum:
        """Remove a member and return it."""
        key = name.upper()
        member = cls._registry.pop(key)
        delattr(cls, key)
        return member

    @classmethod
    def from_name(cls, name: str) -> DynamicEnum | None:
        """The member called ``name`` (any case), or None."""
        return cls._registry.get(name.upper())


def _resolve_dynamic_enum_member(module: str, class_name: str, name: str):
    import importlib

    enum_cls = getattr(importlib.import_module(module), class_name)
    member = enum_cls.from_name(name)
    if member is None:  # registered on the driver at run time, not at import: recreate it here
        member = enum_cls.register(name)
    return member


def convert_to_regular_types(obj: Any) -> Any:
    """Turn OmegaConf containers (ListConfig, DictConfig) into plain lists and dicts, recursively."""
    from omegaconf import DictConfig, ListConfig

    if isinstance(obj, ListConfig | DictConfig):
        from omegaconf import OmegaConf

        return OmegaConf.to_container(obj, resolve=True)
    if isinstance(obj, list | tuple):
        return type(obj)(convert_to_regular_types(x) for x in obj)
    if isinstance(obj, dict):
        return {k: convert_to_regular_types(v) for k, v in obj.items()}
    return obj


def _run_and_put(result_queue, func, args, kwargs):
    try:
        result_queue.put((True, func(*args, **kwargs)))
    except BaseException as exc:  # noqa: BLE001 - the parent re-raises it
        result_queue.put((False, exc))


def timeout_limit(seconds: float, use_signals: bool = False):
    """Decorator: raise TimeoutError if the call takes longer than ``seconds``.

    ``use_signals=True`` uses SIGALRM (main thread only, the call is really interrupted); otherwise the call runs in a
    child process that is killed at the deadline, so a hung function never blocks the caller.
    """

    def decorator(func):
        @functools.wraps(func)
        def with_signal(*args, **kwargs):
            def handler(signum, frame):
                raise TimeoutError(f"{func.__name__} timed out after {seconds} seconds")

            previous = signal.signal(signal.SIGALRM, handler)
            signal.setitimer(signal.ITIMER_REAL, seconds)
            try:
                return func(*args, **kwargs)
            finally:
                signal.setitimer(signal.ITIMER_REAL, 0)
                signal.signal(signal.SIGALRM, previous)

        @functools.wraps(func)
        def with_process(*args, **kwargs):
            ctx = multiprocessing.get_context(
                "fork" if threading.current_thread() is threading.main_thread() else "spawn"
            )
            result_queue = ctx.Queue()
            proc = ctx.Process(target=_run_and_put, args=(result_queue, func, args, kwargs), daemon=True)
            proc.start()
            try:
                ok, value = result_queue.get(timeout=seconds)
            except queue.Empty:
                proc.kill()
                proc.join()
                raise TimeoutError(f"{func.__name__} timed out after {seconds} seconds") from None
            proc.join()
            if not ok:
                raise value
            return value

        return with_signal if use_signals else with_process

    return decorator
