"""The checkpoint-engine interface: the trainer's current weights sent to rollout workers that live elsewhere.

One sender (trainer rank 0, transfer rank 0) streams ``(name, full_tensor)`` pairs; every receiver (a rollout rank,
transfer ranks 1..n) gets the same pairs, in the same order, and loads them into its inference engine. Each transfer
carries an integer weight version, so a rollout knows which policy generated its samples. Tensors travel in buckets
of at most ``bucket_bytes``: a tensor larger than a bucket is split over several and put together again on arrival,
so neither side ever holds more than one bucket plus one tensor beyond its model.

A transport implements :class:`CheckpointEngine` and registers itself under the
``actor_rollout_ref.rollout.checkpoint_engine.backend`` names it serves (:func:`register_checkpoint_engine`); a
transport of the user's registers itself when ``checkpoint_engine.custom_backend_module`` is imported.
"""

from __future__ import annotations

import logging
import math
from abc import ABC, abstractmethod
from collections.abc import Iterable, Iterator
from dataclasses import asdict, dataclass

import torch

logger = logging.getLogger(__name__)

__all__ = [
    "CheckpointEngine",
    "SyncStats",
    "TensorPiece",
    "build_checkpoint_engine",
    "get_checkpoint_engine_cls",
    "pack_pieces",
    "register_checkpoint_engine",
    "resolve_backend",
    "unpack_pieces",
]

_REGISTRY: dict[str, type[CheckpointEngine]] = {}


def register_checkpoint_engine(*names: str):
    """Class decorator: serve ``checkpoint_engine.backend`` ``names`` with the decorated :class:`CheckpointEngine`."""

    def decorate(cls: type[CheckpointEngine]) -> type[CheckpointEngine]:
        for name in names:
            _REGISTRY[name] = cls
        return cls

    return decorate


def resolve_backend(backend: str) -> str:
    """The transport that ``backend`` names on this device. verl's default, ``naive``, means a rollout in the
    trainer's own processes; for a rollout on workers of its own it stands for this device's collective backend
    (gloo on CPU, nccl on CUDA; NPUs have no transport yet). ``local``: sender and receivers in one process
    (in-process worker groups)."""
    if backend == "naive":
        from verl.utils.device import get_nccl_backend

        return get_nccl_backend()
    return backend


def get_checkpoint_engine_cls(
    backend: str,
    key: str = "actor_rollout_ref.rollout.checkpoint_engine.backend",
    custom_backend_module: str | None = None,
):
    """The :class:`CheckpointEngine` registered for ``backend`` (after :func:`resolve_backend`), once the built-in
    transports and ``custom_backend_module`` (``checkpoint_engine.custom_backend_module``) have registered theirs."""
    import importlib

    from verl.checkpoint_engine import collective, local  # noqa: F401  (registers the built-in transports)

    if custom_backend_module:
        importlib.import_module(custom_backend_module)

    name = resolve_backend(backend)
    if name not in _REGISTRY:
        raise ValueError(f"{key}={backend!r} is not a checkpoint-engine backend; expected one of {sorted(_REGISTRY)}")
    return _REGISTRY[name]


def build_checkpoint_engine(
    backend: str,
    rank: int,
    world_size: int,
    bucket_megabytes: float,
    engine_kwargs: dict | None = None,
    custom_backend_module: str | None = None,
) -> CheckpointEngine:
    """The checkpoint engine ``backend`` names (``checkpoint_engine.backend``), as transfer ``rank`` of
    ``world_size``, with buckets of ``bucket_megabytes`` MiB (``update_weights_bucket_megabytes``) and the backend's
    entry of ``engine_kwargs`` (``checkpoint_engine.engine_kwargs.<backend>``); ``custom_backend_module`` is imported
    first (``checkpoint_engine.custom_backend_module``)."""
    cls = get_checkpoint_engine_cls(backend, custom_backend_module=custom_backend_module)
    name = resolve_backend(backend)
    kwargs = dict((engine_kwargs or {}).get(name) or {})
    kwargs.setdefault("backend", name)
    return cls(rank, world_size, CheckpointEngine.bucket_bytes_from_megabytes(bucket_megabytes), **kwargs)


@dataclass
class SyncStats:
    """One weight transfer as one side saw it: ``version``, payload ``bytes`` (the tensors' own bytes), wall
    ``seconds`` (the sender's include producing the tensors, e.g. gathering them from FSDP shards), ``buckets`` and
    ``tensors``."""

    version: int
    bytes: int
    seconds: float
    buckets: int
    tensors: int

    def metrics(self, prefix: str = "checkpoint_engine/") -> dict[str, float]:
        """The stats as trainer metrics (``checkpoint_engine/bytes``, ...) plus the throughput in MB/s."""
        out = {f"{prefix}{key}": float(value) for key, value in asdict(self).items()}
        out[f"{prefix}mb_per_s"] = self.bytes / 1e6 / self.seconds if self.seconds > 0 else 0.0
        return out


_ALIGN = 16  # every tensor starts at a multiple of this in a bucket, so it can be viewed in its dtype without a copy


@dataclass
class TensorPiece:
    """Where a run of one tensor's bytes lies in a bucket: the tensor's ``name``, ``dtype`` (torch name without the
    ``torch.`` prefix), ``shape``, its total ``nbytes``, the ``offset`` of this run inside the tensor's bytes, the
    run's ``length`` and its ``position`` in the bucket's payload. A tensor that fits in what is left of a bucket is
    one piece."""

    name: str
    dtype: str
    shape: list[int]
    nbytes: int
    offset: int
    length: int
    position: int

    def to_list(self) -> list:
        return [self.name, self.dtype, self.shape, self.nbytes, self.offset, self.length, self.position]

    @classmethod
    def from_list(cls, values: list) -> TensorPiece:
        return cls(*values)


def _as_bytes(tensor: torch.Tensor) -> torch.Tensor:
    """A flat uint8 view of ``tensor``'s data (a contiguous copy first where needed)."""
    return tensor.detach().contiguous().reshape(-1).view(torch.uint8)


def pack_pieces(
    weights: Iterable[tuple[str, torch.Tensor]], bucket_bytes: int
) -> Iterator[tuple[list[TensorPiece], list[torch.Tensor], int]]:
    """Cut a stream of named tensors into buckets: yields ``(pieces, byte_runs, payload_bytes)`` per bucket,
    ``byte_runs[i]`` the uint8 ``(pieces[i].length,)`` run that ``pieces[i]`` describes, to be copied at
    ``pieces[i].position``; ``payload_bytes`` (at most ``bucket_bytes``) counts the alignment gaps between tensors.
    A tensor larger than what is left of a bucket goes on in the next. The last bucket may be empty (a stream of no
    tensors still makes one bucket)."""
    if bucket_bytes <= 0:
        raise ValueError(f"bucket size must be positive, got {bucket_bytes} bytes")
    pieces: list[TensorPiece] = []
    runs: list[torch.Tensor] = []
    used = 0
    for name, tensor in weights:
        data = _as_bytes(tensor)
        nbytes = data.numel()
        dtype = str(tensor.dtype).removeprefix("torch.")
        shape = list(tensor.shape)
        start = -(-used // _ALIGN) * _ALIGN
        if pieces and start >= bucket_bytes:  # no room left after the alignment gap: this tensor opens a bucket
            yield pieces, runs, used
            pieces, runs, used, start = [], [], 0, 0
        offset = 0
        while True:
            length = min(bucket_bytes - start, nbytes - offset)
            pieces.append(TensorPiece(name, dtype, shape, nbytes, offset, length, start))
            runs.append(data[offset : offset + length])
            offset += length
            used = start + length
            if offset >= nbytes:
                break
            yield pieces, runs, used  # the bucket is full and this tensor goes on in the next one
            pieces, runs, used, start = [], [], 0, 0
    yield pieces, runs, used


class _Assembler:
    """Puts tensors that span several buckets together again (receiver side)."""

    def __init__(self):
        self._partial: dict[str, torch.Tensor] = {}

    def add(self, piece: TensorPiece, run: torch.Tensor) -> torch.Tensor | None:
        """The whole tensor once ``run`` (this piece's bytes) completes it, else None."""
        dtype = getattr(torch, piece.dtype)
        if piece.offset == 0 and piece.length == piece.nbytes:
            return run.view(dtype).reshape(piece.shape)  # a view into the bucket: no copy
        buffer = self._partial.get(piece.name)
        if buffer is None:
            buffer = self._partial[piece.name] = torch.empty(piece.nbytes, dtype=torch.uint8, device=run.device)
        buffer[piece.offset : piece.offset + piece.length].copy_(run)
        if piece.offset + piece.length < piece.nbytes:
            return None
        del self._partial[piece.name]
        return buffer.view(dtype).reshape(piece.shape)

    def check_empty(self) -> None:
        if self._partial:
            raise RuntimeError(f"checkpoint engine: the transfer ended inside tensors {sorted(self._partial)}")


def unpack_pieces(
    pieces: list[TensorPiece], payload: torch.Tensor, assembler: _Assembler
) -> Iterator[tuple[str, torch.Tensor]]:
    """The tensors one received bucket completes: ``payload`` is its uint8 buffer, runs in ``pieces`` order."""
    for piece in pieces:
        tensor = assembler.add(piece, payload[piece.position : piece.position + piece.length])
        if tensor is not None:
            yield piece.name, tensor


class CheckpointEngine(ABC):
    """One side of a weight transfer between trainer rank 0 (``rank`` 0, the sender) and the rollout ranks
    (``rank`` 1..``world_size``-1, the receivers).

    ``bucket_bytes``: the most bytes one bucket carries. After a transfer, ``version`` is the weight version this
    side last sent or received and ``last_stats`` its :class:`SyncStats`.
    """

    def __init__(self, rank: int, world_size: int, bucket_bytes: int, **engine_kwargs):
        if not 0 <= rank < world_size:
            raise ValueError(f"checkpoint engine rank {rank} is outside a transfer group of {world_size}")
        if bucket_bytes <= 0:
            raise ValueError(f"checkpoint engine bucket size must be positive, got {bucket_bytes} bytes")
        self.rank = rank
        self.world_size = world_size
        self.bucket_bytes = int(bucket_bytes)
        self.engine_kwargs = engine_kwargs
        self.version: int | None = None
        self.last_stats: SyncStats | None = None

    @property
    def is_sender(self) -> bool:
        return self.rank == 0

    @staticmethod
    def bucket_bytes_from_megabytes(megabytes: float) -> int:
        """``update_weights_bucket_megabytes`` in bytes (MiB, as verl counts them)."""
        if not megabytes > 0:
            raise ValueError(
                f"actor_rollout_ref.rollout.checkpoint_engine.update_weights_bucket_megabytes={megabytes}: the bucket "
                "size must be positive"
            )
        return math.ceil(megabytes * (1 << 20))

    @abstractmethod
    def connect(self, master_addr: str, master_port: int) -> None:
        """Join the transfer group whose rendezvous the sender hosts at ``master_addr:master_port`` (every rank of
        the group must call it; it returns once all have)."""

    @abstractmethod
    def send_weights(self, weights: Iterable[tuple[str, torch.Tensor]], version: int) -> SyncStats:
        """Sender: stream ``weights`` (full tensors, in the order the receivers will load them) tagged
        ``version``; returns the transfer's stats once every bucket is out."""

    @abstractmethod
    def receive_weights(self) -> Iterator[tuple[str, torch.Tensor]]:
        """Receiver: the sender's ``(name, tensor)`` pairs of one transfer, bucket by bucket, on the transport's
        device. ``version`` is set once the first bucket arrived, ``last_stats`` when the iterator ends. A yielded
        tensor stays valid as long as the caller keeps it."""

    @abstractmethod
    def finalize(self) -> None:
        """Leave the transfer group (idempotent)."""

    def _log(self, stats: SyncStats) -> None:
        self.last_stats = stats
        self.version = stats.version
        logger.info(
            "checkpoint engine %s version %d: %.1f MB in %d buckets (%d tensors), %.3f s",
            "sent" if self.is_sender else "received",
            stats.version,
            stats.bytes / 1e6,
            stats.buckets,
            stats.tensors,
            stats.seconds,
        )
