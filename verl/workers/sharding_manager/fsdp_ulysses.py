"""Ulysses sequence parallelism around a data-parallel call: every rank of an SP group sees the same samples."""

from __future__ import annotations

from verl.protocol import DataProto, all_gather_data_proto
from verl.workers.sharding_manager.base import BaseShardingManager

__all__ = ["FSDPUlyssesShardingManager"]


class FSDPUlyssesShardingManager(BaseShardingManager):
    """Install the ``sp`` group of ``device_mesh`` (``("dp", "sp")``) as the global Ulysses group while inside.

    After DP dispatch each rank holds its own shard; ``preprocess_data`` all-gathers the shards of the SP group
    (so the ranks of a group cooperate on the same sequences) and ``postprocess_data`` gives each rank its own
    shard back. With ``device_mesh=None`` (sp = 1) everything is a no-op.
    """

    def __init__(self, device_mesh=None):
        super().__init__()
        self.device_mesh = device_mesh
        self._previous_group = None

    def _sp_mesh(self):
        return None if self.device_mesh is None else self.device_mesh["sp"]

    def __enter__(self):
        sp_mesh = self._sp_mesh()
        if sp_mesh is not None:
            # Imported here: the Ulysses utilities are only needed (and only importable cheaply) when sp > 1.
            from verl.utils import ulysses

            self._previous_group = ulysses.get_ulysses_sequence_parallel_group()
            ulysses.set_ulysses_sequence_parallel_group(sp_mesh.get_group())
        return self

    def __exit__(self, exc_type, exc_value, traceback):
        if self._sp_mesh() is not None:
            from verl.utils import ulysses

            ulysses.set_ulysses_sequence_parallel_group(self._previous_group)
            self._previous_group = None
        return None

    def preprocess_data(self, data: DataProto) -> DataProto:
        """All-gather ``data`` within the SP group (rank order): ``B`` rows become ``B * sp`` rows."""
        sp_mesh = self._sp_mesh()
        if sp_mesh is None or sp_mesh.size() == 1:
            return data
        all_gather_data_proto(data, sp_mesh.get_group())
        return data

    def postprocess_data(self, data: DataProto) -> DataProto:
        """This rank's own shard of a result computed for the whole SP group: ``chunk(sp)[sp_rank]``."""
        sp_mesh = self._sp_mesh()
        if sp_mesh is None or sp_mesh.size() == 1:
            return data
        return data.chunk(chunks=sp_mesh.size())[sp_mesh.get_local_rank()]
