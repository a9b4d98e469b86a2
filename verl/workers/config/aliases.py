"""Two spellings of one setting: verl 0.9's key and the older one a v0.4 or 0.7 script still sets.

A section that carries both (``actor.grad_clip`` and ``actor.optim.clip_grad``, ``critic.model.fsdp_config`` and
``critic.fsdp``, ...) calls :func:`unify` when it is built: whichever of the two was moved off its default wins, and
both keys then hold that value, so the workers may read either. Two different non-default values cannot both be
honoured: the section records the pair, and :func:`alias_conflicts` (the config check, before Ray) reports it with
both full key names.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable, Iterator
from typing import Any

from verl.utils.config import BaseConfig

__all__ = ["alias_conflicts", "field_default", "unify", "unify_blocks"]


def _owner(section: BaseConfig, dotted: str) -> tuple[Any, str]:
    """(the node holding the last part of ``dotted``, that part)."""
    *parents, leaf = dotted.split(".")
    node = section
    for part in parents:
        node = getattr(node, part)
    return node, leaf


def field_default(node: Any, name: str) -> Any:
    """The declared default of field ``name`` of dataclass instance ``node`` (which mirrors the YAML's)."""
    for f in dataclasses.fields(node):
        if f.name == name:
            if f.default_factory is not dataclasses.MISSING:
                return f.default_factory()
            return f.default
    raise AttributeError(f"{type(node).__name__} has no field {name!r}")


def _record(section: BaseConfig, home: str, home_value: Any, alias: str, alias_value: Any) -> None:
    conflicts = section.__dict__.setdefault("_alias_conflicts", [])
    conflicts.append((home, home_value, alias, alias_value))


def unify(section: BaseConfig, home: str, alias: str, unset: Iterable[Any] = ()) -> Any:
    """Give ``section.<home>`` and ``section.<alias>`` (dotted names below ``section``) one value and return it.

    A key still at its declared default (or at a value in ``unset``, e.g. None for "not given", which is then left
    as it is) takes the other's value; two moved keys with different values are recorded as a conflict and keep
    their own values (the check refuses the config)."""
    home_node, home_leaf = _owner(section, home)
    alias_node, alias_leaf = _owner(section, alias)
    home_value, alias_value = getattr(home_node, home_leaf), getattr(alias_node, alias_leaf)
    if home_value == alias_value:
        return home_value
    unset = list(unset)
    alias_unset = any(alias_value == u for u in unset)
    home_untouched = home_value == field_default(home_node, home_leaf) or any(home_value == u for u in unset)
    alias_untouched = alias_unset or alias_value == field_default(alias_node, alias_leaf)
    if home_untouched and alias_untouched:
        return home_value  # two defaults that differ (a migration in progress): nothing was set
    if alias_untouched:
        value = home_value
    elif home_untouched:
        value = alias_value
    else:
        _record(section, home, home_value, alias, alias_value)
        return home_value
    setattr(home_node, home_leaf, value)
    if not alias_unset:
        setattr(alias_node, alias_leaf, value)
    return value


def _leaf_names(node: BaseConfig, prefix: str = "") -> Iterator[str]:
    for f in dataclasses.fields(node):
        value = getattr(node, f.name)
        if isinstance(value, BaseConfig):
            yield from _leaf_names(value, f"{prefix}{f.name}.")
        else:
            yield f"{prefix}{f.name}"


def unify_blocks(section: BaseConfig, home: str, alias: str) -> None:
    """:func:`unify` for every leaf of two blocks of one dataclass type (``critic.fsdp`` and the v0.4
    ``critic.model.fsdp_config``)."""
    home_node = section
    for part in home.split("."):
        home_node = getattr(home_node, part)
    for leaf in _leaf_names(home_node):
        unify(section, f"{home}.{leaf}", f"{alias}.{leaf}")


def alias_conflicts(config: BaseConfig, path: str = "") -> list[str]:
    """One message per pair of spellings set to two different values anywhere below ``config`` (a typed config)."""
    problems = []
    where = f"{path}." if path else ""
    for home, home_value, alias, alias_value in config.__dict__.get("_alias_conflicts") or ():
        problems.append(
            f"{where}{home}={home_value!r} and {where}{alias}={alias_value!r} are two spellings of one setting, set "
            f"to different values; set one of them ({where}{home} is verl 0.9's)"
        )
    for f in dataclasses.fields(config):
        value = getattr(config, f.name)
        if isinstance(value, BaseConfig):
            problems += alias_conflicts(value, f"{where}{f.name}")
    return problems
