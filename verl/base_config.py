"""`BaseConfig`: the base of every typed config section (actor, rollout, critic, data, trainer, ...).

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
import sys
from collections.abc import Iterator, Mapping
from typing import Any

from omegaconf import OmegaConf

__all__ = ["BaseConfig", "record_reads", "reads_paused"]


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
        from verl.utils.config import omega_conf_to_dataclass

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
