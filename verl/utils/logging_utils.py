"""Process-wide logging set-up (verl's ``verl.utils.logging_utils``): one place decides the root level."""

from __future__ import annotations

import logging
import os

LEVEL_ENV = "VERL_LOGGING_LEVEL"


def set_basic_config(level: int | str | None = None) -> None:
    """Configure the root logger once; ``level`` defaults to ``$VERL_LOGGING_LEVEL`` or WARNING.

    Library code logs at WARNING unless the user asks for more (VERL_LOGGING_LEVEL=INFO, DEBUG, ...). Like
    ``logging.basicConfig``, a root logger that already has handlers is left alone.
    """
    if level is None:
        level = os.environ.get(LEVEL_ENV, "WARNING")
    logging.basicConfig(level=level.upper() if isinstance(level, str) else level)
