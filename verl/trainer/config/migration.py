"""From verl v0.4.1 to today's verl: the defaults that moved, and which of them change what a v0.4.1 script trains.

The YAML holds today's verl defaults (0.9). A verl v0.4.1 command line still means the same run: where a default
moved and the move changes what is trained (not only how fast), the entry says how, `docs/migration.md` says so key
by key, and `main_ppo` prints the entries that apply to a run at start-up. The values themselves are the YAML's;
this table only names the keys and their v0.4.1 values (a test holds the two to verl's transcribed defaults).
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

__all__ = [
    "CHANGED_DEFAULTS",
    "KEPT_DEFAULTS",
    "ChangedDefault",
    "KeptDefault",
    "changed_defaults_in_effect",
    "changed_defaults_line",
    "set_on_command_line",
]


@dataclass(frozen=True)
class ChangedDefault:
    """A key whose default moved since verl v0.4.1. ``effect``: what a v0.4.1 script that leaves the key alone now
    trains differently; empty when only speed, memory or logging change."""

    key: str
    v041: Any
    effect: str = ""


_OTHER_DRAWS = "other random draws, so other sampled responses (the same distribution)"

CHANGED_DEFAULTS: tuple[ChangedDefault, ...] = (
    # required now: a v0.4.1 script that leaves it out is refused before Ray, naming the key
    ChangedDefault("actor_rollout_ref.rollout.name", "vllm"),
    ChangedDefault("actor_rollout_ref.rollout.seed", 0, "the sampling seed is 42; " + _OTHER_DRAWS),
    ChangedDefault("actor_rollout_ref.rollout.max_num_seqs", 1024),
    ChangedDefault("actor_rollout_ref.rollout.load_format", "dummy_dtensor"),
    ChangedDefault("actor_rollout_ref.model.use_remove_padding", False),
    ChangedDefault("critic.model.use_remove_padding", False),
    ChangedDefault("data.return_raw_chat", False),
    ChangedDefault(
        "data.seed",
        1,
        "the training prompts are shuffled by a generator with torch's fixed default seed instead of seed 1: "
        "another (still reproducible) order",
    ),
    ChangedDefault("actor_rollout_ref.actor.profiler.ranks", None),
    ChangedDefault("actor_rollout_ref.ref.profiler.ranks", None),
    ChangedDefault("actor_rollout_ref.rollout.profiler.ranks", None),
    ChangedDefault("critic.profiler.ranks", None),
    ChangedDefault("reward_model.profiler.ranks", None),
)


@dataclass(frozen=True)
class KeptDefault:
    """A key whose default here differs from verl 0.9's on purpose: ``verl`` is 0.9's value, ``why`` the reason."""

    key: str
    verl: Any
    why: str


KEPT_DEFAULTS: tuple[KeptDefault, ...] = (
    KeptDefault(
        "actor_rollout_ref.rollout.mode",
        "async",
        "sync (v0.4.1's): agent loops do not pass a vision-language model's images yet, so async by default would "
        "refuse every VLM run; async (agent loops, HF or vLLM) runs when asked for",
    ),
    KeptDefault(
        "actor_rollout_ref.rollout.enforce_eager",
        False,
        "True (v0.4.1's): with free_cache_engine=True (the default) the engine's memory is released between "
        "generations, which captured CUDA graphs cannot survive here; the config check refuses that pair",
    ),
    KeptDefault(
        "actor_rollout_ref.rollout.calculate_log_probs",
        True,
        "False (v0.4.1's): the rollout-vs-trainer probe needs the old log-probs from a pass of their own, which an "
        "on-policy update (one epoch, one mini batch) skips here; verl computes that pass anyway. Rollout correction "
        "asks for True and the check says so",
    ),
    KeptDefault(
        "data.dataloader_num_workers",
        8,
        "0 (v0.4.1's code default): rows are read in the driver process, which holds Ray and torch state that "
        "8 forked loader processes would copy",
    ),
)


def set_on_command_line(key: str, set_keys: Iterable[str]) -> bool:
    """True when the command line (``set_keys``) sets ``key`` or a section above it (``trainer={...}`` sets every
    trainer key)."""
    return any(key == k or key.startswith(k + ".") for k in set_keys)


def changed_defaults_in_effect(set_keys: Iterable[str]) -> list[ChangedDefault]:
    """The moved defaults that change training and that a run leaves alone (``set_keys``: the command line's keys)."""
    set_keys = list(set_keys)
    return [c for c in CHANGED_DEFAULTS if c.effect and not set_on_command_line(c.key, set_keys)]


def changed_defaults_line(config, set_keys: Iterable[str]) -> str | None:
    """One start-up line naming each moved default in effect with its value now and in v0.4.1, or None."""
    from omegaconf import OmegaConf

    parts = []
    for change in changed_defaults_in_effect(set_keys):
        now = OmegaConf.select(config, change.key, default=None)
        parts.append(f"{change.key}={now!r} (v0.4.1: {change.v041!r}; {change.effect})")
    if not parts:
        return None
    return "defaults that moved since verl v0.4.1 and change this run (docs/migration.md): " + "; ".join(parts)
