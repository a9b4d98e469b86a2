"""verl 0.9's rollout skipping (``skip:`` in ppo_trainer.yaml): dump a step's rollout once and reuse it in later runs.

Only its config lives here, at the path verl's YAML names (``verl.utils.skip.SkipManagerConfig``): the feature is
not implemented, so the config check accepts nothing but the defaults (checks.unsupported_keys).
"""

from __future__ import annotations

from dataclasses import dataclass, field

from verl.utils.config import BaseConfig

__all__ = ["SkipConfig", "SkipManagerConfig"]


@dataclass
class SkipConfig(BaseConfig):
    """One skipper: whether it runs, where it dumps, which steps it replaces, and how (cache or repeat)."""

    enable: bool = False
    dump_dir: str = "~/.verl/rollout_dump"
    steps: list[int] = field(default_factory=list)
    action: str = "cache"


@dataclass
class SkipManagerConfig(BaseConfig):
    """`skip`: the skippers of verl's synchronous, TransferQueue and fully asynchronous trainers."""

    rollout: SkipConfig = field(default_factory=SkipConfig)
    rollout_tq: SkipConfig = field(default_factory=SkipConfig)
    async_rollout: SkipConfig = field(default_factory=SkipConfig)
