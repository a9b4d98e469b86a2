"""Console metric logger and rank-aware print/log helpers (verl.utils.logger)."""

from verl.utils.logger.aggregate_logger import (
    DecoratorLoggerBase,
    LocalLogger,
    concat_dict_to_str,
    log_with_rank,
    print_rank_0,
    print_with_rank,
    print_with_rank_and_timer,
)

__all__ = [
    "DecoratorLoggerBase",
    "LocalLogger",
    "concat_dict_to_str",
    "log_with_rank",
    "print_rank_0",
    "print_with_rank",
    "print_with_rank_and_timer",
]
