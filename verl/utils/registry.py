"""Name -> class registries behind the ``@register("name")`` decorators (reward managers, agent loops, tool-call
parsers): one place for the rule that a name, once taken, cannot silently change owner."""

from __future__ import annotations

__all__ = ["NamedRegistry"]


class NamedRegistry(dict):
    """A dict of registered classes; ``kind`` names them in errors (e.g. "agent loop")."""

    def __init__(self, kind: str, base: type | None = None):
        super().__init__()
        self.kind, self.base = kind, base

    def add(self, name: str, cls: type) -> type:
        """Register ``cls`` as ``name``; registering the same class again is allowed, another class is not."""
        if self.base is not None and not (isinstance(cls, type) and issubclass(cls, self.base)):
            raise TypeError(f"a {self.kind} must be a subclass of {self.base.__name__}, got {cls!r}")
        existing = self.get(name)
        if existing is not None and existing is not cls:
            raise ValueError(
                f"{self.kind} {name!r} is already registered by {existing.__module__}.{existing.__qualname__}; "
                f"cannot register {cls.__module__}.{cls.__qualname__}"
            )
        self[name] = cls
        return cls

    def decorator(self, name: str):
        """``@registry.decorator("name")`` on a class registers it."""
        return lambda cls: self.add(name, cls)

    def names(self) -> list[str]:
        return sorted(self)
