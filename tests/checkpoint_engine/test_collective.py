"""The collective checkpoint engine across three processes (gloo): one sender, two receivers, several dtypes,
buckets smaller than one tensor, successive versions; and the bucket packing on its own."""

from __future__ import annotations

import os
import sys

import pytest
import torch
import torch.multiprocessing as mp

from tests.gloo_ranks import publish_port, wait_for_port
from verl.checkpoint_engine import SyncStats, build_checkpoint_engine, get_checkpoint_engine_cls, resolve_backend
from verl.checkpoint_engine.base import _Assembler, pack_pieces, unpack_pieces
from verl.checkpoint_engine.collective import host_rendezvous

WORLD = 3


def _weights(version: int) -> list[tuple[str, torch.Tensor]]:
    """A model-like stream whose values depend on ``version``: float32, bfloat16, float16, int64, bool, a 0-d
    tensor, an empty one and a non-contiguous one."""
    g = torch.Generator().manual_seed(version)
    return [
        ("embed.weight", torch.randn(37, 8, generator=g)),
        ("layers.0.attn.weight", torch.randn(5, 3, generator=g).to(torch.bfloat16)),
        ("layers.0.norm.weight", torch.randn(11, generator=g).to(torch.float16)),
        ("step", torch.tensor(version)),
        ("mask", torch.rand(9, generator=g) > 0.5),
        ("empty", torch.empty(0, 4)),
        ("lm_head.weight", torch.randn(8, 6, generator=g).t()),  # transposed: not contiguous
    ]


def _payload_bytes(weights) -> int:
    return sum(t.numel() * t.element_size() for _, t in weights)


def _rank_main(rank: int, bucket_sizes: list[int], versions: list[int], out_dir: str) -> None:
    engine = build_checkpoint_engine("gloo", rank, WORLD, bucket_sizes[0] / (1 << 20))
    assert engine.bucket_bytes == bucket_sizes[0]
    port_file = os.path.join(out_dir, "port")
    if rank == 0:  # the sender binds its rendezvous first, then hands the port out
        publish_port(port_file, host_rendezvous("127.0.0.1"))
    engine.connect("127.0.0.1", wait_for_port(port_file))
    results = []
    for bucket_bytes, version in zip(bucket_sizes, versions, strict=True):
        engine.bucket_bytes = bucket_bytes  # only the sender's matters: receivers follow its buckets
        if rank == 0:
            results.append(engine.send_weights(iter(_weights(version)), version))
        else:
            received = [(name, tensor.clone()) for name, tensor in engine.receive_weights()]
            results.append((engine.version, engine.last_stats, received))
    engine.finalize()
    torch.save(results, os.path.join(out_dir, f"rank{rank}.pt"))
    sys.stdout.flush()
    os._exit(0)  # see tests/gloo_ranks.py: no interpreter teardown while gloo's threads finish


def test_every_receiver_gets_every_tensor_of_every_version_exactly(tmp_path):
    # 64-byte buckets, smaller than most tensors here (embed.weight is 1184 bytes): they span buckets; then one
    # bucket of 1 MiB that holds the whole stream
    bucket_sizes, versions = [64, 64, 64, 1 << 20], [0, 1, 7, 3]
    args = (bucket_sizes, versions, str(tmp_path))
    mp.spawn(_rank_main, args=args, nprocs=WORLD, join=True)
    sent, *receivers = [torch.load(tmp_path / f"rank{rank}.pt", weights_only=False) for rank in range(WORLD)]
    bucket_bytes = 64
    for index, version in enumerate(versions[:3]):
        expected = _weights(version)
        stats = sent[index]
        assert isinstance(stats, SyncStats) and stats.version == version
        assert stats.bytes == _payload_bytes(expected) == 1184 + 30 + 22 + 8 + 9 + 0 + 192
        assert stats.tensors == len(expected)
        assert stats.buckets >= stats.bytes // bucket_bytes  # the tensors really were cut into 64-byte buckets
        for got_version, got_stats, received in (r[index] for r in receivers):
            assert got_version == version
            assert (got_stats.version, got_stats.bytes, got_stats.buckets) == (version, stats.bytes, stats.buckets)
            assert [name for name, _ in received] == [name for name, _ in expected]
            for (name, got), (_, want) in zip(received, expected, strict=True):
                assert got.dtype == want.dtype and got.shape == want.shape, name
                assert torch.equal(got, want), name

    assert sent[3].buckets == 1  # 3 broadcasts for the whole sync
    for version, stats, received in (r[3] for r in receivers):
        assert version == 3 and stats.buckets == 1
        assert all(torch.equal(a, b) for (_, a), (_, b) in zip(received, _weights(3), strict=True))


@pytest.mark.parametrize("bucket_bytes", [1, 16, 17, 100, 4096])
def test_packing_round_trips_and_keeps_each_bucket_within_its_size(bucket_bytes):
    weights = _weights(5)
    assembler = _Assembler()
    received = []
    for pieces, runs, payload_bytes in pack_pieces(iter(weights), bucket_bytes):
        assert payload_bytes <= bucket_bytes
        payload = torch.zeros(payload_bytes, dtype=torch.uint8)
        for piece, run in zip(pieces, runs, strict=True):
            payload[piece.position : piece.position + piece.length] = run
            # a whole tensor starts aligned, so the receiver can view it in its dtype without a copy
            assert piece.offset > 0 or piece.position % 16 == 0
        received.extend((name, tensor.clone()) for name, tensor in unpack_pieces(pieces, payload, assembler))
    assembler.check_empty()
    assert [name for name, _ in received] == [name for name, _ in weights]
    assert all(torch.equal(a, b) and a.dtype == b.dtype for (_, a), (_, b) in zip(received, weights, strict=True))


def test_an_empty_stream_is_one_empty_bucket():
    assert [(pieces, payload) for pieces, _, payload in pack_pieces(iter([]), 64)] == [([], 0)]


def test_backends_resolve_by_name_and_an_unknown_one_names_the_key():
    assert resolve_backend("naive") == "gloo"  # this CPU machine's collectives
    assert get_checkpoint_engine_cls("naive") is get_checkpoint_engine_cls("gloo")
    with pytest.raises(ValueError, match=r"actor_rollout_ref\.rollout\.checkpoint_engine\.backend='mooncake'"):
        get_checkpoint_engine_cls("mooncake")
    with pytest.raises(ValueError, match="update_weights_bucket_megabytes=0: the bucket size must be positive"):
        build_checkpoint_engine("gloo", 0, 2, 0)
    with pytest.raises(ValueError, match="rank 2 is outside a transfer group of 2"):
        build_checkpoint_engine("gloo", 2, 2, 1)


def test_stats_become_trainer_metrics():
    metrics = SyncStats(version=4, bytes=2_000_000, seconds=0.5, buckets=2, tensors=10).metrics()
    assert metrics["checkpoint_engine/version"] == 4 and metrics["checkpoint_engine/bytes"] == 2e6
    assert metrics["checkpoint_engine/mb_per_s"] == pytest.approx(4.0)


def test_the_local_transport_hands_each_transfer_to_every_receiver_once():
    sender, *receivers = (build_checkpoint_engine("local", rank, 3, 64 / (1 << 20)) for rank in range(3))
    for engine in (sender, *receivers):
        engine.connect("in-process", 1)
    stats = sender.send_weights(iter(_weights(2)), 2)
    assert stats.bytes == _payload_bytes(_weights(2)) and stats.buckets > 1
    with pytest.raises(RuntimeError, match=r"version 2 was not received by ranks \[1, 2\]"):
        sender.send_weights(iter(_weights(3)), 3)
    for engine in receivers:
        received = list(engine.receive_weights())
        assert engine.version == 2 and engine.last_stats.bytes == stats.bytes
        assert all(torch.equal(a, b) for (_, a), (_, b) in zip(received, _weights(2), strict=True))
        with pytest.raises(RuntimeError, match="nothing to receive"):
            next(engine.receive_weights())
    sender.send_weights(iter(_weights(3)), 3)  # every receiver read version 2: the next one may go
    for engine in (sender, *receivers):
        engine.finalize()


def test_a_rendezvous_bound_ahead_serves_the_sender_with_the_engines_timeout():
    """The sender's store, bound by host_rendezvous before the engine exists, is the one connect uses, and it takes
    the engine's ``timeout_s`` (a group of one: the sender alone)."""
    from datetime import timedelta

    port = host_rendezvous("127.0.0.1")
    engine = build_checkpoint_engine("gloo", 0, 1, 1.0, {"gloo": {"timeout_s": 7.0}})
    engine.connect("127.0.0.1", port)
    try:
        assert engine._store.port == port and engine._store.timeout == timedelta(seconds=7)
    finally:
        engine.finalize()
