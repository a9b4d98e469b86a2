"""A user's hook after each checkpoint (``trainer.checkpoint_callback_class``), run by the trainer in the driver.

The class is named by its dotted path, built once as ``cls(config=<the whole config>)``, and its ``on_save`` is called
after every checkpoint the trainer publishes, e.g. to upload it or register it somewhere. An exception it raises stops
the run: a hook that copies checkpoints elsewhere must not fail unnoticed (catch inside ``on_save`` for a
best-effort hook). A save that failed (``trainer.on_save_error=continue``) calls no hook.
"""

from __future__ import annotations

from verl.utils.import_utils import load_class_by_name

__all__ = ["CheckpointCallback", "build_checkpoint_callback"]


class CheckpointCallback:
    """Base class of checkpoint hooks (it does nothing); subclasses override ``on_save``."""

    def __init__(self, config=None):
        self.config = config

    def on_save(self, trainer, global_step: int, checkpoint_dir: str, async_save: bool = False, **kwargs) -> None:
        """Called after the checkpoint of ``global_step`` was published at ``checkpoint_dir`` (a ``global_step_N``
        folder); ``async_save`` is always False here (every save is finished when the hook runs). Accept
        ``**kwargs``: later versions may pass more."""


def build_checkpoint_callback(config, class_name: str | None) -> CheckpointCallback:
    """The hook ``class_name`` (``trainer.checkpoint_callback_class``) names, built with ``config`` (the composed
    config), or a no-op one when it is null."""
    if not class_name:
        return CheckpointCallback(config=config)
    cls = load_class_by_name(class_name, "trainer.checkpoint_callback_class")
    if not isinstance(cls, type):
        raise TypeError(f"trainer.checkpoint_callback_class={class_name!r} is not a class")
    return cls(config=config)
