"""Conversions between OmegaConf configs and typed dataclasses."""

from __future__ import annotations

import dataclasses
import functools
import types
import typing
from collections.abc import Mapping
from typing import Any

from omegaconf import DictConfig, ListConfig, OmegaConf

__all__ = ["omega_conf_to_dataclass", "update_dict_with_config"]


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

    Without ``dataclass_type`` the section's ``_target_`` names the class (Hydra's instantiate). Interpolations are
    resolved. A key the dataclass does not declare raises a TypeError that names it with its dotted ``path`` (so a
    typo is reported, not ignored), unless ``allow_extra``: then it is kept in the section's ``extra`` mapping (a
    `BaseConfig`), which is how a recipe's own keys travel. A value of the wrong type (a string for an int, a list
    for a bool, ...) raises a TypeError naming the key, the value and the expected type.
    """
    if dataclass_type is None:
        from hydra.utils import instantiate

        if config is None or "_target_" not in config:
            raise TypeError("omega_conf_to_dataclass: config has no '_target_' and no dataclass_type given")
        return instantiate(config, _convert_="partial")
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
    if hasattr(instance, "extra"):  # a BaseConfig: its YAML path, for record_reads
        object.__setattr__(instance, "_key_path", path)
    if extra:
        if not hasattr(instance, "extra"):
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
