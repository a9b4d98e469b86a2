"""The no-op sharding manager: the interface every training/inference layout switch implements."""

from __future__ import annotations

from verl.protocol import DataProto

__all__ = ["BaseShardingManager"]


class BaseShardingManager:
    """Context manager around a generation call; ``preprocess_data``/``postprocess_data`` reshape the batch.

    ``timing`` holds the seconds spent switching layouts (``{"reshard": s}`` once a subclass measured it); the
    worker reads it after every generation, so the base class provides an empty dict.
    """

    def __init__(self):
        self.timing: dict[str, float] = {}

    def __enter__(self):
        return self

    def __exit__(self, exc_type, exc_value, traceback):
        return None

    def preprocess_data(self, data: DataProto) -> DataProto:
        """The batch this rank's engine should generate for (identity here)."""
        return data

    def postprocess_data(self, data: DataProto) -> DataProto:
        """This rank's share of the generated batch (identity here)."""
        return data
