"""Config checks of verl 0.9's ``distillation`` section, which is not implemented yet: anything but its defaults is
refused before Ray starts.

``checks.unsupported_keys`` compares the section's own keys with the defaults. Two things it cannot see are here: a
teacher beyond verl's single ``teacher_model`` (added with ``+distillation.teacher_models.<name>...``), and a
teacher's inference keys that follow the policy's rollout by interpolation (their default is the rollout's value in
this run, not a constant).
"""

from __future__ import annotations

__all__ = ["check_distillation"]

_NOT_YET = "on-policy distillation is not implemented yet; leave the distillation section at its defaults"
# a teacher's inference keys whose default is the policy's rollout's value
_FOLLOWS_ROLLOUT = ("name", "dtype", "prompt_length", "response_length", "temperature")


def check_distillation(config) -> list[str]:
    """The problems of ``config.distillation`` (``config``: the typed PPO config) beyond the unsupported-keys table."""
    teachers = config.distillation.teacher_models
    problems = [
        f"distillation.teacher_models.{name}: {_NOT_YET} (a teacher of its own is not read)" for name in teachers.extra
    ]
    inference, rollout = teachers.teacher_model.inference, config.actor_rollout_ref.rollout
    for name in _FOLLOWS_ROLLOUT:
        value, followed = getattr(inference, name), getattr(rollout, name)
        if value != followed:
            problems.append(
                f"distillation.teacher_models.teacher_model.inference.{name}={value!r} (it follows "
                f"actor_rollout_ref.rollout.{name}={followed!r} by default): {_NOT_YET}"
            )
    return problems
