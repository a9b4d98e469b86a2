"""Name -> reward-manager class registry (``reward_model.reward_manager`` picks one by name)."""

from __future__ import annotations

from verl.utils.registry import NamedRegistry

__all__ = ["REWARD_MANAGER_REGISTRY", "register", "get_reward_manager_cls"]

REWARD_MANAGER_REGISTRY = NamedRegistry("reward manager")


def register(name: str):
    """Class decorator registering a reward manager under ``name`` (re-registering the same class is allowed)."""
    return REWARD_MANAGER_REGISTRY.decorator(name)


def get_reward_manager_cls(name: str) -> type:
    """The class registered as ``name`` (case-sensitive); ValueError naming it if unknown."""
    if name not in REWARD_MANAGER_REGISTRY:
        raise ValueError(f"Unknown reward manager: {name}")
    return REWARD_MANAGER_REGISTRY[name]
