"""The checkpoint engine over torch.distributed collectives: gloo on CPU, NCCL on GPUs.

The sender and the receivers already belong to default process groups of their own (each worker group's FSDP or
Megatron world), so the transfer group is built beside them: a ``TCPStore`` that the sender hosts at the address the
driver handed out, and a process group object constructed directly on it (``ProcessGroupGloo(store, rank, size)``),
which torch.distributed's global state never sees. Its collectives are called on that object.

A bucket travels as three broadcasts from rank 0: its sizes and version (``int64 (4,)``), its table of pieces (JSON
bytes) and its payload, the bucket's tensors packed byte by byte into one contiguous buffer, whatever their dtypes.
A sync of a model is therefore ``3 * buckets`` collectives, not one per tensor.
"""

from __future__ import annotations

import ipaddress
import json
import time
from collections.abc import Iterable, Iterator
from datetime import timedelta

import torch
import torch.distributed as dist

from verl.checkpoint_engine.base import (
    CheckpointEngine,
    SyncStats,
    TensorPiece,
    _Assembler,
    pack_pieces,
    register_checkpoint_engine,
    unpack_pieces,
)
from verl.utils.device import get_device_id, get_device_name

__all__ = ["CollectiveCheckpointEngine", "host_rendezvous"]

_STORE_PREFIX = "verl_checkpoint_engine"

# Rendezvous stores the sender bound before it handed out their port, by port: picking a free port first and binding
# it later lets another socket (a gloo pair's ephemeral port, say) take it in between (EADDRINUSE).
_HOSTED_STORES: dict[int, dist.TCPStore] = {}


def host_rendezvous(master_addr: str) -> int:
    """Bind the sender's rendezvous store now, on a port the kernel picks, and return that port; the sender's
    :meth:`CollectiveCheckpointEngine.connect` to it later takes this store (with the engine's timeout) instead of
    binding a new one."""
    store = dist.TCPStore(master_addr, 0, None, is_master=True, wait_for_workers=False)
    _HOSTED_STORES[store.port] = store
    return store.port


def _is_loopback(address: str) -> bool:
    if address == "localhost":
        return True
    try:
        return ipaddress.ip_address(address).is_loopback
    except ValueError:
        return False


@register_checkpoint_engine("gloo", "nccl")
class CollectiveCheckpointEngine(CheckpointEngine):
    """Broadcasts of flattened buckets in a process group of its own. ``backend``: ``gloo`` (CPU tensors) or
    ``nccl`` (tensors on this process's GPU); ``timeout_s``: how long a rank waits for the others."""

    def __init__(
        self, rank: int, world_size: int, bucket_bytes: int, backend: str = "gloo", timeout_s: float = 600.0, **kw
    ):
        super().__init__(rank, world_size, bucket_bytes, **kw)
        if backend not in ("gloo", "nccl"):
            raise ValueError(f"collective checkpoint engine backend must be gloo or nccl, got {backend!r}")
        self.backend = backend
        self.timeout = timedelta(seconds=timeout_s)
        self.device = torch.device("cpu") if backend == "gloo" else torch.device(get_device_name(), get_device_id())
        self._store = None
        self._group = None
        self._send_buffer: torch.Tensor | None = None

    # ------------------------------------------------------------------------------------------------ group
    def connect(self, master_addr: str, master_port: int) -> None:
        store = _HOSTED_STORES.pop(int(master_port), None) if self.is_sender else None
        if store is not None:
            store.set_timeout(self.timeout)  # bound before this engine, and its timeout_s, existed
        else:
            store = dist.TCPStore(
                master_addr,
                int(master_port),
                self.world_size,
                is_master=self.is_sender,
                timeout=self.timeout,
                wait_for_workers=False,
            )
        self._store = store
        store = dist.PrefixStore(_STORE_PREFIX, store)
        if self.backend == "gloo":
            options = dist.ProcessGroupGloo._Options()
            options._timeout = self.timeout
            if _is_loopback(master_addr):  # every rank is on this host: talk over loopback, whatever the hostname
                options._devices = [dist.ProcessGroupGloo.create_device(hostname="127.0.0.1")]
            else:
                options._devices = [dist.ProcessGroupGloo.create_default_device()]
            self._group = dist.ProcessGroupGloo(store, self.rank, self.world_size, options)
        else:
            options = dist.ProcessGroupNCCL.Options()
            options._timeout = self.timeout
            self._group = dist.ProcessGroupNCCL(store, self.rank, self.world_size, options)
        # a first collective: every rank returns from connect only once all of them are in
        self._broadcast(torch.zeros(1, dtype=torch.int64, device=self.device))

    def _broadcast(self, tensor: torch.Tensor) -> None:
        if self._group is None:
            raise RuntimeError("checkpoint engine: connect() was not called (init_checkpoint_engine on the workers)")
        options = dist.BroadcastOptions()
        options.rootRank = 0
        options.rootTensor = 0
        options.timeout = self.timeout
        self._group.broadcast([tensor], options).wait()

    def finalize(self) -> None:
        if self._group is not None and hasattr(self._group, "shutdown"):
            try:
                self._group.shutdown()
            except RuntimeError:  # already torn down by a failed peer
                pass
        self._group = self._store = self._send_buffer = None

    # ------------------------------------------------------------------------------------------------ sender
    def _payload_buffer(self, nbytes: int) -> torch.Tensor:
        if self._send_buffer is None or self._send_buffer.numel() < nbytes:
            self._send_buffer = torch.empty(max(nbytes, 1), dtype=torch.uint8, device=self.device)
        return self._send_buffer[:nbytes]

    def _send_bucket(
        self, pieces: list[TensorPiece], runs: list[torch.Tensor], payload_bytes: int, version: int, last: bool
    ) -> int:
        header = json.dumps([piece.to_list() for piece in pieces]).encode()
        sizes = torch.tensor([len(header), payload_bytes, int(last), version], dtype=torch.int64)
        self._broadcast(sizes.to(self.device))
        self._broadcast(torch.frombuffer(bytearray(header), dtype=torch.uint8).to(self.device))
        payload = self._payload_buffer(payload_bytes)
        for piece, run in zip(pieces, runs, strict=True):
            payload[piece.position : piece.position + piece.length].copy_(run)
        self._broadcast(payload)
        return sum(piece.length for piece in pieces)

    def send_weights(self, weights: Iterable[tuple[str, torch.Tensor]], version: int) -> SyncStats:
        if not self.is_sender:
            raise RuntimeError(f"checkpoint engine rank {self.rank} receives; only rank 0 sends")
        start = time.perf_counter()
        total = buckets = tensors = 0
        pending = None  # one bucket held back, so the last one can say it is the last
        for bucket in pack_pieces(weights, self.bucket_bytes):
            if pending is not None:
                total += self._send_bucket(*pending, version=version, last=False)
                buckets += 1
            pending = bucket
            tensors += sum(1 for piece in bucket[0] if piece.offset + piece.length == piece.nbytes)
        total += self._send_bucket(*pending, version=version, last=True)
        buckets += 1
        stats = SyncStats(
            version=int(version), bytes=total, seconds=time.perf_counter() - start, buckets=buckets, tensors=tensors
        )
        self._log(stats)
        return stats

    # ------------------------------------------------------------------------------------------------ receiver
    def receive_weights(self) -> Iterator[tuple[str, torch.Tensor]]:
        if self.is_sender:
            raise RuntimeError("checkpoint engine rank 0 sends; receive_weights runs on rollout ranks")
        assembler = _Assembler()
        start = None
        total = buckets = tensors = 0
        version = None
        while True:
            sizes = torch.empty(4, dtype=torch.int64, device=self.device)
            self._broadcast(sizes)
            if start is None:
                start = time.perf_counter()
            header_len, payload_len, last, bucket_version = sizes.tolist()
            if version is None:
                version = self.version = int(bucket_version)
            elif bucket_version != version:
                raise RuntimeError(f"checkpoint engine: bucket of version {bucket_version} inside transfer {version}")
            header = torch.empty(header_len, dtype=torch.uint8, device=self.device)
            self._broadcast(header)
            pieces = [TensorPiece.from_list(item) for item in json.loads(bytes(header.cpu().numpy()).decode())]
            payload = torch.empty(max(payload_len, 1), dtype=torch.uint8, device=self.device)[:payload_len]
            self._broadcast(payload)  # a fresh buffer per bucket: the tensors handed out are views into it
            total += sum(piece.length for piece in pieces)
            buckets += 1
            for name, tensor in unpack_pieces(pieces, payload, assembler):
                tensors += 1
                yield name, tensor
            if last:
                break
        assembler.check_empty()
        self._log(
            SyncStats(
                version=version, bytes=total, seconds=time.perf_counter() - start, buckets=buckets, tensors=tensors
            )
        )
