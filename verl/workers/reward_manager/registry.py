"""Name -> reward-manager class registry (``reward_model.reward_manager`` picks one by name)."""

from __future__ import annotations

__all__ = ["REWARD_MANAGER_REGISTRY", "register", "get_reward_manager_cls"]

REWARD_MANAGER_REGISTRY: dict[str, type] = {}


def register(name: str):
    """Class decorator registering a reward manager under ``name`` (re-registering the same class is allowed)."""

    def decorator(cls: type) -> type:
        existing = REWARD_MANAGER_REGISTRY.get(name)
        if existing is not None and existing is not cls:
            raise ValueError(f"Reward manager {name!r} is already registered as {existing!r}; cannot register {cls!r}")
        REWARD_MANAGER_REGISTRY[name] = cls
        return cls

    return decorator


def get_reward_manager_cls(name: str) -> type:
    """The class registered as ``name`` (case-sensitive); ValueError naming it if unknown."""
    if name not in REWARD_MANAGER_REGISTRY:
        raise ValueError(f"Unknown reward manager: {name}")
    return REWARD_MANAGER_REGISTRY[name]
