"""Checks of the trainer-wide keys verl renamed or added since v0.4: the profilers, a key spelled two ways (v0.4's
and verl 0.9's: `trainer.profile_steps` / `global_profiler.steps`, `ray_init.*` / `ray_kwargs.*`), verl 0.7's
`trainer.use_legacy_worker_impl`, and the data keys that only some rollouts honour. Run before Ray starts.

The keys whose runtime is not here at all (the non-torch profiler tools, verl's v1 trainer modes, rollout skipping,
TransferQueue, ...) are refused by `checks.unsupported_keys` instead.
"""

from __future__ import annotations

from verl.trainer.config.trainer import (
    PROFILED_SECTIONS,
    WORKER_IMPLEMENTATIONS,
    profile_steps,
    ray_init_options,
)
from verl.utils.debug.profile import TORCH_PROFILER_CONTENTS, TORCH_PROFILER_TOOLS
from verl.workers.config.errors import ConfigError

__all__ = ["check_trainer_keys"]

_OTHER_TOOLS = (
    "only torch.profiler runs here: set it to torch or null (both take torch.profiler Chrome traces, "
    "docs/performance.md); for nsys, run the job under nsys yourself"
)


def _section(config, dotted: str):
    node = config
    for part in dotted.split("."):
        node = getattr(node, part)
    return node


def _check_profilers(config) -> None:
    tool = config.global_profiler.tool
    if tool not in TORCH_PROFILER_TOOLS:
        raise ConfigError(f"global_profiler.tool={tool!r}: {_OTHER_TOOLS}")
    for section in PROFILED_SECTIONS:
        profiler = _section(config, section).profiler
        if profiler.tool not in TORCH_PROFILER_TOOLS:
            raise ConfigError(f"{section}.profiler.tool={profiler.tool!r}: {_OTHER_TOOLS}")
        contents = list(profiler.tool_config.torch.contents)
        unknown = [c for c in contents if c not in TORCH_PROFILER_CONTENTS]
        if unknown:
            raise ConfigError(
                f"{section}.profiler.tool_config.torch.contents={contents!r}: {unknown} not known; expected some of "
                f"{list(TORCH_PROFILER_CONTENTS)}"
            )
    profile_steps(config)  # trainer.profile_steps and global_profiler.steps: one list


def _check_agent_loop_template(config) -> None:
    kwargs = dict(config.data.apply_chat_template_kwargs or {})
    rollout = config.actor_rollout_ref.rollout
    if kwargs and (rollout.mode == "async" or rollout.multi_turn.enable):
        raise ConfigError(
            f"data.apply_chat_template_kwargs={kwargs!r} applies to the dataset's prompts, but the agent loops of "
            f"rollout.mode={rollout.mode!r} / multi_turn.enable={rollout.multi_turn.enable} render each prompt again "
            "without them; use the synchronous single-turn rollout (mode=sync, multi_turn.enable=False), or bake the "
            "options into the model's chat template (actor_rollout_ref.model.custom_chat_template)"
        )


def check_trainer_keys(config) -> None:
    """Raise ConfigError for the first problem of these keys (``config``: the typed PPO config)."""
    _check_profilers(config)
    ray_init_options(config)  # ray_init.* and ray_kwargs.*: one value each
    impl = config.trainer.use_legacy_worker_impl
    if impl not in WORKER_IMPLEMENTATIONS:
        raise ConfigError(
            f"trainer.use_legacy_worker_impl={impl!r}: expected one of {list(WORKER_IMPLEMENTATIONS)} (verl 0.7's "
            "choice of worker classes; each runs this project's one worker implementation)"
        )
    _check_agent_loop_template(config)
