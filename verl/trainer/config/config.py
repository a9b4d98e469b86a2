"""verl's `verl.trainer.config.config` module path, for the classes its YAML names there (`ModuleConfig`, the
`_target_` of `reward.reward_manager.module`)."""

from verl.workers.config.reward import ModuleConfig

__all__ = ["ModuleConfig"]
