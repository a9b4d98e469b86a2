"""Checks that a typed config tree mirrors its YAML (shared by the PPO and SFT config tests)."""

from __future__ import annotations

import dataclasses
import typing

from hydra import compose, initialize_config_module
from omegaconf import OmegaConf


def compose_config(config_name: str, overrides=()):
    """The composed ``verl/trainer/config/<config_name>.yaml`` with Hydra overrides."""
    with initialize_config_module("verl.trainer.config", version_base=None):
        return compose(config_name, overrides=list(overrides))


def _default(f: dataclasses.Field):
    return f.default_factory() if f.default_factory is not dataclasses.MISSING else f.default


def _section_class(hint):
    """The dataclass a field holds (``X`` or ``X | None``), or None."""
    if dataclasses.is_dataclass(hint):
        return hint
    found = [arg for arg in typing.get_args(hint) if dataclasses.is_dataclass(arg)]
    return found[0] if len(found) == 1 else None


def _walk(cls, section: dict, path: str, problems: list[str], missing: dict, present: dict) -> None:
    hints = typing.get_type_hints(cls)
    fields = {f.name: f for f in dataclasses.fields(cls)}
    section = {k: v for k, v in section.items() if k != "_target_"}  # the node's class name (checked elsewhere)
    present.setdefault(cls, set()).update(section)
    for key in section:
        if key not in fields:
            problems.append(f"{path}.{key} is in the YAML but not a field of {cls.__name__}")
    for name, f in fields.items():
        if name not in section:
            missing.setdefault(cls, set()).add(name)
        elif _section_class(hints[name]) is not None and isinstance(section[name], dict):
            _walk(_section_class(hints[name]), section[name], f"{path}.{name}", problems, missing, present)
        elif _default(f) != section[name]:
            problems.append(f"{path}.{name}: {cls.__name__} default {_default(f)!r} != YAML {section[name]!r}")


def yaml_mirror_problems(root_cls, config_name: str) -> list[str]:
    """Every way ``root_cls`` fails to mirror the resolved YAML.

    A YAML key must be a field whose default equals the YAML's value. A field some place of the YAML lacks must be
    in its class's ``DERIVED_KEYS`` (filled in by a worker from other keys, never set by a user) or be given where
    the same class is used elsewhere (ref's fsdp_config lists fewer keys than the actor's). A ``DERIVED_KEYS`` entry
    must name a field the YAML really lacks everywhere (no stale entries).
    """
    yaml = OmegaConf.to_container(compose_config(config_name), resolve=True)
    problems: list[str] = []
    missing: dict[type, set[str]] = {}
    present: dict[type, set[str]] = {}
    _walk(root_cls, yaml, "", problems, missing, present)
    for cls, names in missing.items():
        undocumented = names - present[cls] - set(getattr(cls, "DERIVED_KEYS", ()))
        if undocumented:
            problems.append(f"{cls.__name__} fields {sorted(undocumented)} are neither in the YAML nor DERIVED_KEYS")
    for cls in present:
        for name in getattr(cls, "DERIVED_KEYS", ()):
            if name in present[cls] or name not in {f.name for f in dataclasses.fields(cls)}:
                problems.append(f"{cls.__name__}.DERIVED_KEYS lists {name!r}, which is in the YAML or not a field")
    return problems


def assert_no_extra_keys(section, path: str = "root") -> None:
    """The default YAML builds into declared fields only, at every depth."""
    assert not section.extra, f"{path}: unexpected extra keys {section.extra}"
    for f in dataclasses.fields(section):
        value = getattr(section, f.name)
        if dataclasses.is_dataclass(value):
            assert_no_extra_keys(value, f"{path}.{f.name}")
