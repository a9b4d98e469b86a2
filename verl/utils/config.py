"""Typed config sections built from OmegaConf configs: `BaseConfig` and the conversion `omega_conf_to_dataclass`.

Generic machinery (it knows no section): the sections themselves, with the checks and batch-size rules, live in
`verl.trainer.config`. It sits here, below every layer that reads a config, because utilities (the profiler's
`ProfilerConfig`) are typed sections too.

`BaseConfig`: the base of every typed config section (actor, rollout, critic, data, trainer, ...).

A section is a dataclass whose fields are the keys of its YAML section, with the YAML's defaults (a test keeps the
two equal, so the YAML stays the one place a default is decided). Code reads attributes (`cfg.actor.clip_ratio`).

Sections also behave like the read-only mapping that verl's code and users' recipes were written against: `get`,
`[]`, `in`, `keys()` and `**section` work as they did on the `DictConfig`. Keys beyond the declared fields, which a
recipe's YAML or a `+section.key=value` override adds, are kept as *extra* keys: readable as attributes and through
the mapping interface, so a recipe that reads its own keys keeps working. Typos cannot slip in that way: Hydra
refuses an override of a key that is not in the YAML unless it is spelled with `+`.

`record_reads()` (opt-in, for tests) records which declared keys the code reads, by their YAML path. It costs
nothing while inactive: only then is the recording ``__getattribute__`` installed on the class.
"""

from __future__ import annotations

import contextlib
import dataclasses
import functools
import sys
import types
import typing
from collections.abc import Iterator, Mapping
from typing import Any

from omegaconf import DictConfig, ListConfig, OmegaConf

__all__ = ["BaseConfig", "omega_conf_to_dataclass", "reads_paused", "record_reads", "update_dict_with_config"]


class _TypeMismatch(TypeError):
    pass


def omega_conf_to_dataclass(
    config: DictConfig | Mapping | None,
    dataclass_type: type | None = None,
    *,
    allow_extra: bool = False,
    path: str = "",
) -> Any:
    """Build ``dataclass_type`` from a config section, converting nested dataclass fields (and lists of them).

    Without ``dataclass_type`` the section's ``_target_`` names the class (verl's YAML nodes carry one); a dataclass
    is built as above, anything else by Hydra's instantiate. Interpolations are
    resolved. A key the dataclass does not declare raises a TypeError that names it with its dotted ``path`` (so a
    typo is reported, not ignored), unless ``allow_extra``: then it is kept in the section's ``extra`` mapping (a
    `BaseConfig`), which is how a recipe's own keys travel. A value of the wrong type (a string for an int, a list
    for a bool, ...) raises a TypeError naming the key, the value and the expected type.
    """
    if dataclass_type is None:
        from hydra.utils import get_class, instantiate

        if config is None or "_target_" not in config:
            raise TypeError("omega_conf_to_dataclass: config has no '_target_' and no dataclass_type given")
        target = get_class(config["_target_"])
        if not dataclasses.is_dataclass(target):
            return instantiate(config, _convert_="partial")
        # verl names one class for nodes of several roles (the ref's node is an actor config): keys the class does
        # not declare stay readable as extra keys, as a recipe's do
        dataclass_type, allow_extra = target, True
    if not dataclasses.is_dataclass(dataclass_type):
        raise TypeError(f"omega_conf_to_dataclass: {dataclass_type} is not a dataclass")
    if isinstance(config, dataclass_type):
        return config
    if config is None:
        config = {}
    values = _plain(config)
    if not isinstance(values, dict):
        raise TypeError(f"{path or dataclass_type.__name__}: expected a mapping of keys, got {values!r}")
    return _build(dataclass_type, values, allow_extra, path)


def _plain(config):
    """A resolved plain-Python copy of an OmegaConf node (dicts and lists); other values unchanged."""
    if isinstance(config, DictConfig | ListConfig):
        return OmegaConf.to_container(config, resolve=True)
    if dataclasses.is_dataclass(config) and not isinstance(config, type):
        return config.to_dict() if hasattr(config, "to_dict") else dataclasses.asdict(config)
    if isinstance(config, Mapping):
        return {k: _plain(v) for k, v in config.items()}
    return config


@functools.cache
def _hints(dataclass_type: type) -> dict[str, Any]:
    return typing.get_type_hints(dataclass_type)


def _build(dataclass_type: type, values: dict, allow_extra: bool, path: str):
    values = dict(values)
    values.pop("_target_", None)
    fields = {f.name: f for f in dataclasses.fields(dataclass_type) if f.init}
    unknown = [k for k in values if k not in fields]
    if unknown and not allow_extra:
        where = f"{path}." if path else ""
        raise TypeError(
            f"{dataclass_type.__name__} has no field(s) {[where + str(k) for k in unknown]}; "
            f"known fields: {sorted(fields)}"
        )
    # nested extra sections stay OmegaConf nodes, so a recipe reads them as before (cfg.filter_groups.enable)
    extra = {
        k: OmegaConf.create(v) if isinstance(v, dict | list) else v for k, v in ((k, values.pop(k)) for k in unknown)
    }
    hints = _hints(dataclass_type)
    kwargs = {}
    for name, value in values.items():
        key = f"{path}.{name}" if path else name
        kwargs[name] = _convert(value, hints.get(name, Any), allow_extra, key)
    instance = dataclass_type(**kwargs)
    if isinstance(instance, BaseConfig):  # its YAML path, for record_reads
        object.__setattr__(instance, "_key_path", path)
    if extra:
        if not isinstance(instance, BaseConfig):
            raise TypeError(f"{dataclass_type.__name__} cannot hold extra keys {sorted(extra)} ({path or 'root'})")
        instance.extra.update(extra)
    return instance


def _convert(value, annotation, allow_extra: bool, key: str):
    """``value`` checked against (and, for dataclasses, built into) ``annotation``."""
    try:
        return _convert_or_raise(value, annotation, allow_extra, key)
    except _TypeMismatch:
        raise TypeError(f"{key}={value!r} has the wrong type; expected {_type_name(annotation)}") from None


def _convert_or_raise(value, annotation, allow_extra: bool, key: str):
    if annotation is Any:
        return value
    origin = typing.get_origin(annotation)
    if origin in (typing.Union, types.UnionType):
        options = typing.get_args(annotation)
        if value is None and type(None) in options:
            return None
        for option in options:
            if option is type(None):
                continue
            try:
                return _convert_or_raise(value, option, allow_extra, key)
            except (_TypeMismatch, TypeError):
                continue
        raise _TypeMismatch
    if dataclasses.is_dataclass(annotation):
        if isinstance(value, annotation):
            return value
        if not isinstance(value, dict):
            raise _TypeMismatch
        return _build(annotation, value, allow_extra, key)
    if origin in (list, tuple) or annotation in (list, tuple):
        if not isinstance(value, list | tuple):
            raise _TypeMismatch
        args = typing.get_args(annotation)
        item_type = args[0] if args and origin is list else Any
        items = [_convert(v, item_type, allow_extra, f"{key}[{i}]") for i, v in enumerate(value)]
        return tuple(items) if (origin or annotation) is tuple else items
    if origin is dict or annotation is dict:
        if not isinstance(value, dict):
            raise _TypeMismatch
        return value
    if annotation is bool:
        if not isinstance(value, bool):
            raise _TypeMismatch
        return value
    if annotation is int:
        if isinstance(value, bool) or not isinstance(value, int):
            raise _TypeMismatch
        return value
    if annotation is float:
        if isinstance(value, bool) or not isinstance(value, int | float):
            raise _TypeMismatch
        return float(value)
    if annotation is str:
        if not isinstance(value, str):
            raise _TypeMismatch
        return value
    if annotation is type(None):
        if value is not None:
            raise _TypeMismatch
        return None
    return value


def _type_name(annotation) -> str:
    if isinstance(annotation, type):
        return annotation.__name__
    return str(annotation).replace("typing.", "")


def update_dict_with_config(dictionary: dict, config: DictConfig) -> None:
    """Overwrite the keys of ``dictionary`` that ``config`` also has."""
    for key in dictionary:
        if hasattr(config, key):
            dictionary[key] = getattr(config, key)


# ---------------------------------------------------------------------------------------------------- typed sections
@dataclasses.dataclass
class BaseConfig(Mapping):
    """A typed config section that also reads like a mapping (see the module docstring)."""

    def __post_init__(self) -> None:
        # not a dataclass field: extra keys are not part of the declared schema (asdict, ==, repr ignore them)
        object.__setattr__(self, "_extra", {})

    # ------------------------------------------------------------------------------------------------ extra keys
    @property
    def extra(self) -> dict[str, Any]:
        """Keys beyond the declared fields (from a recipe's YAML or a `+key=value` override)."""
        return self.__dict__.setdefault("_extra", {})

    def __getattr__(self, name: str) -> Any:
        # only reached when normal lookup fails: a declared field never gets here
        if name.startswith("__") or name == "_extra":
            raise AttributeError(name)
        extra = self.__dict__.get("_extra", {})
        if name in extra:
            return extra[name]
        raise AttributeError(
            f"{type(self).__name__} has no key {name!r}; declared keys: {sorted(self._field_names())}"
            + (f", extra keys: {sorted(extra)}" if extra else "")
        )

    @classmethod
    def from_config(cls, config) -> BaseConfig:
        """``config`` (a DictConfig, a mapping, or already this type) as this section type, extra keys kept."""
        return omega_conf_to_dataclass(config, cls, allow_extra=True)

    @classmethod
    def _field_names(cls) -> list[str]:
        return [f.name for f in dataclasses.fields(cls)]

    # ------------------------------------------------------------------------------------------------ mapping
    def __getitem__(self, key: str) -> Any:
        if key in self._field_names():
            return getattr(self, key)
        extra = self.__dict__.get("_extra", {})
        if key in extra:
            return extra[key]
        raise KeyError(key)

    def __iter__(self) -> Iterator[str]:
        yield from self._field_names()
        yield from self.__dict__.get("_extra", {})

    def __len__(self) -> int:
        return len(self._field_names()) + len(self.__dict__.get("_extra", {}))

    def __contains__(self, key: object) -> bool:
        return key in self._field_names() or key in self.__dict__.get("_extra", {})

    # dataclass's generated __eq__ compares the fields; Mapping's would compare items (extra keys included)
    __hash__ = None  # type: ignore[assignment]

    def to_dict(self) -> dict[str, Any]:
        """Plain nested dict of every key (declared and extra), e.g. for a tracker's config table."""
        with reads_paused():  # copying every key for a log is not honouring it
            return self._to_dict()

    def _to_dict(self) -> dict[str, Any]:

        def plain(value):
            if isinstance(value, BaseConfig):
                return value.to_dict()
            if OmegaConf.is_config(value):
                return OmegaConf.to_container(value, resolve=True)
            if isinstance(value, list | tuple):
                return [plain(v) for v in value]
            if isinstance(value, dict):
                return {k: plain(v) for k, v in value.items()}
            return value

        return {key: plain(self[key]) for key in self}


# ---------------------------------------------------------------------------------------------------- read tracking
_reads: set[tuple[str, str]] | None = None
_paused = 0


def _recording_getattribute(self: BaseConfig, name: str) -> Any:
    value = object.__getattribute__(self, name)
    if (
        _reads is not None
        and not _paused
        and name[0] != "_"
        and name in type(self).__dataclass_fields__
        # dataclass-generated __eq__/__repr__ read every field; that is not the code using them
        and sys._getframe(1).f_code.co_filename != "<string>"
    ):
        path = object.__getattribute__(self, "__dict__").get("_key_path")
        _reads.add((f"<{type(self).__name__}>" if path is None else path, name))
    return value


@contextlib.contextmanager
def record_reads() -> Iterator[set[tuple[str, str]]]:
    """While active, collect ``(section path, field)`` for every declared field read on any `BaseConfig`.

    The section path is the dotted YAML path (``"actor_rollout_ref.actor"``, ``""`` for the root) of a section built
    by `omega_conf_to_dataclass`, or ``"<TypeName>"`` for one built otherwise. Not reentrant.
    """
    global _reads
    if _reads is not None:
        raise RuntimeError("record_reads() is already active")
    reads: set[tuple[str, str]] = set()
    _reads = reads
    BaseConfig.__getattribute__ = _recording_getattribute
    try:
        yield reads
    finally:
        del BaseConfig.__getattribute__
        _reads = None


@contextlib.contextmanager
def reads_paused() -> Iterator[None]:
    """Reads inside this block are not recorded (a config check, a log of the whole config)."""
    global _paused
    _paused += 1
    try:
        yield
    finally:
        _paused -= 1
