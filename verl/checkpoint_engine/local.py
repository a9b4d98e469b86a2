"""The checkpoint engine for a sender and receivers in one process (``backend=local``): the in-process worker group
runs the actor's and the rollout's workers in the driver, one call after the other, where a collective (which needs
both sides at once) would wait forever.

The sender packs its stream into buckets exactly as the collective transport does and leaves them in a mailbox of
this process, named by the rendezvous address; each receiver takes them from there on its next
:meth:`receive_weights`. A transfer costs one copy of the weights until every receiver has read it.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Iterable, Iterator

import torch

from verl.checkpoint_engine.base import (
    CheckpointEngine,
    SyncStats,
    _Assembler,
    pack_pieces,
    register_checkpoint_engine,
    unpack_pieces,
)

__all__ = ["LocalCheckpointEngine"]


class _Mailbox:
    """One transfer group's last transfer: its buckets, version and the receivers that still have to read it."""

    def __init__(self):
        self.buckets: list[tuple[list, torch.Tensor]] = []
        self.version: int | None = None
        self.unread: set[int] = set()
        self.members: set[int] = set()


_MAILBOXES: dict[str, _Mailbox] = {}
_LOCK = threading.Lock()


@register_checkpoint_engine("local")
class LocalCheckpointEngine(CheckpointEngine):
    """Buckets handed over in memory between workers of one process (see the module doc)."""

    def __init__(self, rank: int, world_size: int, bucket_bytes: int, backend: str = "local", **kw):
        super().__init__(rank, world_size, bucket_bytes, **kw)
        self._key: str | None = None

    def connect(self, master_addr: str, master_port: int) -> None:
        self._key = f"{master_addr}:{master_port}"
        with _LOCK:
            box = _MAILBOXES.setdefault(self._key, _Mailbox())
            if self.rank in box.members:
                raise RuntimeError(f"checkpoint engine rank {self.rank} joined {self._key} twice")
            box.members.add(self.rank)

    def _mailbox(self) -> _Mailbox:
        if self._key is None:
            raise RuntimeError("checkpoint engine: connect() was not called (init_checkpoint_engine on the workers)")
        return _MAILBOXES[self._key]

    def send_weights(self, weights: Iterable[tuple[str, torch.Tensor]], version: int) -> SyncStats:
        if not self.is_sender:
            raise RuntimeError(f"checkpoint engine rank {self.rank} receives; only rank 0 sends")
        start = time.perf_counter()
        buckets, total, tensors = [], 0, 0
        for pieces, runs, payload_bytes in pack_pieces(weights, self.bucket_bytes):
            payload = torch.empty(payload_bytes, dtype=torch.uint8)
            for piece, run in zip(pieces, runs, strict=True):
                payload[piece.position : piece.position + piece.length].copy_(run)
            buckets.append((pieces, payload))
            total += sum(piece.length for piece in pieces)
            tensors += sum(1 for piece in pieces if piece.offset + piece.length == piece.nbytes)
        box = self._mailbox()
        with _LOCK:
            if box.unread:
                raise RuntimeError(
                    f"checkpoint engine: version {box.version} was not received by ranks {sorted(box.unread)} before "
                    f"version {version} was sent (call receive_weights on the rollout after each send_weights)"
                )
            box.buckets, box.version, box.unread = buckets, int(version), set(range(1, self.world_size))
        stats = SyncStats(int(version), total, time.perf_counter() - start, len(buckets), tensors)
        self._log(stats)
        return stats

    def receive_weights(self) -> Iterator[tuple[str, torch.Tensor]]:
        if self.is_sender:
            raise RuntimeError("checkpoint engine rank 0 sends; receive_weights runs on rollout ranks")
        box = self._mailbox()
        with _LOCK:
            if self.rank not in box.unread:
                raise RuntimeError(
                    "checkpoint engine (local): nothing to receive; with backend=local the sender's send_weights must "
                    "run first, in this process"
                )
            buckets, version = box.buckets, box.version
        start = time.perf_counter()
        self.version = version
        assembler = _Assembler()
        total = tensors = 0
        shared = self.world_size > 2  # other receivers read the same buckets: each gets its own copies then
        for pieces, payload in buckets:
            total += sum(piece.length for piece in pieces)
            for name, tensor in unpack_pieces(pieces, payload, assembler):
                tensors += 1
                yield name, tensor.clone() if shared else tensor
        assembler.check_empty()
        with _LOCK:
            box.unread.discard(self.rank)
            if not box.unread:
                box.buckets = []
        self._log(SyncStats(version, total, time.perf_counter() - start, len(buckets), tensors))

    def finalize(self) -> None:
        if self._key is None:
            return
        with _LOCK:
            box = _MAILBOXES.get(self._key)
            if box is not None:
                box.members.discard(self.rank)
                if not box.members:
                    del _MAILBOXES[self._key]
        self._key = None
