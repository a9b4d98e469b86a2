"""`ConfigError`: what every config check raises."""

__all__ = ["ConfigError", "raise_config_errors"]


class ConfigError(ValueError):
    """A config value is invalid; the message names the key, the value and what is expected."""


def raise_config_errors(errors: list[str]) -> None:
    """Raise one ConfigError for every problem found (its message alone when there is one); nothing if none."""
    if len(errors) == 1:
        raise ConfigError(errors[0])
    if errors:
        raise ConfigError(f"{len(errors)} config errors:\n  - " + "\n  - ".join(errors))
