"""Which training engine serves a role's ``strategy`` (``actor_rollout_ref.actor.strategy``, ``critic.strategy``,
``reward_model.strategy``)."""

from __future__ import annotations

from verl.utils.registry import NamedRegistry
from verl.workers.engine.base import TrainingEngine

__all__ = ["get_engine_cls", "register_engine"]

_ENGINES = NamedRegistry("training engine", TrainingEngine)


def register_engine(*strategies: str):
    """Class decorator: the engine serves the roles whose ``strategy`` is one of ``strategies``."""

    def decorator(cls: type[TrainingEngine]) -> type[TrainingEngine]:
        for strategy in strategies:
            _ENGINES.add(strategy, cls)
        return cls

    return decorator


def get_engine_cls(strategy: str, config_key: str = "strategy") -> type[TrainingEngine]:
    """The engine class registered for ``strategy``; ``config_key`` names the setting in the error (e.g.
    ``actor_rollout_ref.actor.strategy``)."""
    import verl.workers.engine.fsdp  # noqa: F401  (registers the built-in engines)

    if strategy == "megatron" and _ENGINES.get(strategy) is None:
        try:  # optional: megatron-core is the `megatron` extra
            import verl.workers.engine.megatron.engine  # noqa: F401
        except ImportError as e:
            raise ValueError(
                f"{config_key}='megatron' needs megatron-core ({e}); install it with pip install -e .[megatron]"
            ) from e
    engine_cls = _ENGINES.get(strategy)
    if engine_cls is None:
        raise ValueError(
            f"{config_key}={strategy!r} has no training engine; known strategies: {', '.join(_ENGINES.names())}"
        )
    return engine_cls
