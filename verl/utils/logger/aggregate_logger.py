"""Console logging of metrics and rank-aware log helpers."""

from __future__ import annotations

import datetime
import logging
import numbers

import torch.distributed as dist

__all__ = [
    "concat_dict_to_str",
    "LocalLogger",
    "DecoratorLoggerBase",
    "print_rank_0",
    "print_with_rank",
    "print_with_rank_and_timer",
    "log_with_rank",
]


def _rank() -> int:
    return dist.get_rank() if dist.is_available() and dist.is_initialized() else 0


def concat_dict_to_str(data: dict, step: int) -> str:
    """One console line: `step:N - key:value - ...` with numeric values to 3 decimals; other values skipped."""
    parts = [f"step:{step}"]
    for key, value in data.items():
        if isinstance(value, numbers.Number) and not isinstance(value, bool):
            parts.append(f"{key}:{value:.3f}")
        elif hasattr(value, "item") and getattr(value, "ndim", None) == 0:
            # 0-d tensors / numpy scalars count as numbers.
            parts.append(f"{key}:{float(value.item()):.3f}")
    return " - ".join(parts)


class LocalLogger:
    """Prints metrics to stdout in verl's console format."""

    def __init__(self, print_to_console: bool = True):
        self.print_to_console = print_to_console

    def flush(self) -> None:
        """Nothing is buffered; kept for the tracker interface."""

    def log(self, data: dict, step: int) -> None:
        """Print `data` as one `step:N - k:v - ...` line."""
        if self.print_to_console:
            print(concat_dict_to_str(data, step=step), flush=True)

    def finish(self) -> None:
        """Nothing to close."""


class DecoratorLoggerBase:
    """Base for decorators that log on behalf of a role, optionally only on rank 0."""

    def __init__(
        self,
        role: str,
        logger: logging.Logger | None = None,
        level: int = logging.DEBUG,
        rank: int = 0,
        log_only_rank_0: bool = True,
    ):
        self.role = role
        self.logger = logger
        self.level = level
        self.rank = rank
        self.log_only_rank_0 = log_only_rank_0
        self.logging_function = self.log_by_logging if logger is not None else self.log_by_print

    def log(self, message: str) -> None:
        """Emit `message` unless this rank is silenced."""
        if self.log_only_rank_0 and self.rank != 0:
            return
        self.logging_function(message)

    def log_by_print(self, message: str) -> None:
        """Print `[role] message`."""
        print(f"{self.role} {message}", flush=True)

    def log_by_logging(self, message: str) -> None:
        """Log `[role] message` at the configured level."""
        self.logger.log(self.level, f"{self.role} {message}")


def print_rank_0(message: str) -> None:
    """Print only on global rank 0 (or when torch.distributed is not initialized)."""
    if _rank() == 0:
        print(message, flush=True)


def print_with_rank(message: str, rank: int = 0, log_only_rank_0: bool = False) -> None:
    """Print `[Rank r] message`; with `log_only_rank_0`, only rank 0 prints."""
    if log_only_rank_0 and rank != 0:
        return
    print(f"[Rank {rank}] {message}", flush=True)


def print_with_rank_and_timer(message: str, rank: int = 0, log_only_rank_0: bool = False) -> None:
    """Print `[timestamp] [Rank r] message`."""
    if log_only_rank_0 and rank != 0:
        return
    now = datetime.datetime.now().strftime("%Y-%m-%d %H:%M:%S")
    print(f"[{now}] [Rank {rank}] {message}", flush=True)


def log_with_rank(
    message: str, rank: int, logger: logging.Logger, level: int = logging.INFO, log_only_rank_0: bool = False
) -> None:
    """Log `[Rank r] message` through `logger`; with `log_only_rank_0`, only rank 0 logs."""
    if log_only_rank_0 and rank != 0:
        return
    logger.log(level, f"[Rank {rank}] {message}")
