"""`ConfigError`: what every config check raises."""

__all__ = ["ConfigError"]


class ConfigError(ValueError):
    """A config value is invalid; the message names the key, the value and what is expected."""
