"""Bytes and seconds per weight sync of the checkpoint engine (gloo, one sender and ``--receivers`` receivers).

Each process is its own rank of the transfer group, as trainer rank 0 and the rollout ranks are. The sender streams
a model's full weights (fp32, HF names, a tied LM head left out as the hand-offs do) for the shipped default model
and a random model of SmolLM2-135M's shape, with 64 MiB and 512 MiB buckets. The baseline, measured in the same run
on the same group: one broadcast of a single flat buffer of the same bytes, the least any bucketed sync can cost.

Prints one JSON line per (model, bucket size): bytes, buckets, median seconds per sync, MB/s, and the ratio of the
sync's seconds to the baseline's.

Usage: python scripts/benchmark/bench_checkpoint_engine.py [--repeats 5] [--receivers 1] [--models default,smollm2-135m]
"""

from __future__ import annotations

import argparse
import json
import os
import socket
import statistics
import sys
import time

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, REPO)

import torch  # noqa: E402
import torch.multiprocessing as mp  # noqa: E402

# SmolLM2-135M's architecture (llama, tied embeddings, vocabulary 49152)
SMOLLM2_135M = dict(
    model_type="llama",
    hidden_size=576,
    num_hidden_layers=30,
    num_attention_heads=9,
    num_key_value_heads=3,
    intermediate_size=1536,
    vocab_size=49152,
    tie_word_embeddings=True,
)
BUCKETS_MB = (64, 512)


def _shapes(model: str) -> list[tuple[str, torch.Size]]:
    """``(hf_name, shape)`` of the model's weights in state-dict order, without building the weights."""
    from transformers import AutoConfig, AutoModelForCausalLM

    if model == "default":
        from verl.demo.assets import resolve_builtin_path

        config = AutoConfig.from_pretrained(resolve_builtin_path("builtin://default_model"))
    else:
        config = AutoConfig.for_model(**SMOLLM2_135M)
    with torch.device("meta"):
        module = AutoModelForCausalLM.from_config(config)
    tied = config.tie_word_embeddings
    return [(n, t.shape) for n, t in module.state_dict().items() if not (tied and n == "lm_head.weight")]


def _rank(rank: int, world: int, port: int, models: list[str], repeats: int, out: str) -> None:
    from verl.checkpoint_engine import build_checkpoint_engine

    torch.set_num_threads(1)
    engine = build_checkpoint_engine("gloo", rank, world, BUCKETS_MB[0])
    engine.connect("127.0.0.1", port)
    results = []
    for model in models:
        shapes = _shapes(model)
        g = torch.Generator().manual_seed(0)
        weights = [(n, torch.randn(s, generator=g)) if rank == 0 else (n, None) for n, s in shapes]
        total = sum(torch.Size(s).numel() * 4 for _, s in shapes)
        flat = torch.empty(total, dtype=torch.uint8)
        engine._broadcast(flat)  # warm-up: the first transfer of this size sets up gloo's buffers
        baseline, syncs = [], {mb: [] for mb in BUCKETS_MB}
        for version in range(repeats):  # interleaved, so load from other processes hits every variant alike
            start = time.perf_counter()
            engine._broadcast(flat)
            baseline.append(time.perf_counter() - start)
            for bucket_mb in BUCKETS_MB:
                engine.bucket_bytes = bucket_mb << 20
                if rank == 0:
                    syncs[bucket_mb].append(engine.send_weights(iter(weights), version))
                else:
                    for _ in engine.receive_weights():
                        pass
                    syncs[bucket_mb].append(engine.last_stats)
        base = statistics.median(baseline)
        for bucket_mb, runs in syncs.items():
            seconds = statistics.median(s.seconds for s in runs)
            results.append(
                {
                    "figure": "checkpoint_engine_sync",
                    "model": model,
                    "bucket_mb": bucket_mb,
                    "side": "sender" if rank == 0 else "receiver",
                    "bytes": runs[0].bytes,
                    "tensors": runs[0].tensors,
                    "buckets": runs[0].buckets,
                    "seconds": round(seconds, 4),
                    "mb_per_s": round(runs[0].bytes / 1e6 / seconds, 1),
                    "baseline_flat_broadcast_seconds": round(base, 4),
                    "ratio_to_baseline": round(seconds / base, 3),
                    "receivers": world - 1,
                }
            )
    engine.finalize()
    if rank == 0:
        with open(out, "w") as f:
            f.write("\n".join(json.dumps(r) for r in results) + "\n")
    sys.stdout.flush()
    os._exit(0)  # no interpreter teardown while gloo's threads finish (see tests/gloo_ranks.py)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--receivers", type=int, default=1)
    parser.add_argument("--models", default="default,smollm2-135m")
    args = parser.parse_args()
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    out = os.path.join(os.environ.get("TMPDIR", "/tmp"), f"bench_checkpoint_engine_{os.getpid()}.jsonl")
    world = 1 + args.receivers
    mp.spawn(_rank, args=(world, port, args.models.split(","), args.repeats, out), nprocs=world, join=True)
    with open(out) as f:
        print(f.read(), end="")
    os.remove(out)


if __name__ == "__main__":
    main()
