"""verl's import path of `BaseConfig` (verl head): the class lives in `verl.utils.config`."""

from verl.utils.config import BaseConfig

__all__ = ["BaseConfig"]
