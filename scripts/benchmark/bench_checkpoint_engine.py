"""Bytes and seconds per weight sync of the checkpoint engine (gloo, one sender and ``--receivers`` receivers).

Each process is its own rank of the transfer group, as trainer rank 0 and the rollout ranks are. The sender streams
a model's full weights (fp32, HF names, a tied LM head left out as the hand-offs do) for the shipped default model
and a random model of SmolLM2-135M's shape, with 64 MiB and 512 MiB buckets. The baseline, measured in the same run
on the same group: one broadcast of a single flat buffer of the same bytes, the least any bucketed sync can cost.

Prints one JSON line per (model, bucket size): bytes, buckets, median seconds per sync, MB/s, and the ratio of the
sync's seconds to the baseline's.

``--workers``: the whole sync between real workers instead, an FSDP2 actor (one process) and a standalone HF rollout
(another): the actor gathers its weights and sends them (``send_weights``), the rollout receives and loads them into
its model (``receive_weights``); seconds as the sender and the receiver measured them.

Usage: python scripts/benchmark/bench_checkpoint_engine.py [--repeats 5] [--receivers 1] [--models default,smollm2-135m]
       [--workers]
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

from scripts.benchmark.shapes import SMOLLM2_135M, hf_config_kwargs  # noqa: E402

BUCKETS_MB = (64, 512)


def _row(figure: str, model: str, bucket_mb: int, side: str, runs: list) -> dict:
    """One JSON line: a sync's bytes, buckets and tensors, and the median seconds (and MB/s) of ``runs``."""
    seconds = statistics.median(s.seconds for s in runs)
    return {
        "figure": figure,
        "model": model,
        "bucket_mb": bucket_mb,
        "side": side,
        "bytes": runs[0].bytes,
        "tensors": runs[0].tensors,
        "buckets": runs[0].buckets,
        "seconds": round(seconds, 4),
        "mb_per_s": round(runs[0].bytes / 1e6 / seconds, 1),
    }


def _shapes(model: str) -> list[tuple[str, torch.Size]]:
    """``(hf_name, shape)`` of the model's weights in state-dict order, without building the weights."""
    from transformers import AutoConfig, AutoModelForCausalLM

    if model == "default":
        from verl.demo.assets import resolve_builtin_path

        config = AutoConfig.from_pretrained(resolve_builtin_path("builtin://default_model"))
    else:
        config = AutoConfig.for_model(**hf_config_kwargs(SMOLLM2_135M))
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
        if rank == 0:  # and one untimed sync
            engine.send_weights(iter(weights), -1)
        else:
            for _ in engine.receive_weights():
                pass
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
            row = _row("checkpoint_engine_sync", model, bucket_mb, "sender" if rank == 0 else "receiver", runs)
            row.update(
                baseline_flat_broadcast_seconds=round(base, 4),
                ratio_to_baseline=round(row["seconds"] / base, 3),
                receivers=world - 1,
            )
            results.append(row)
    engine.finalize()
    if rank == 0:
        with open(out, "w") as f:
            f.write("\n".join(json.dumps(r) for r in results) + "\n")
    sys.stdout.flush()
    os._exit(0)  # no interpreter teardown while gloo's threads finish (see tests/gloo_ranks.py)


def _model_dir(model: str, root: str) -> str:
    if model == "default":
        from verl.demo.assets import resolve_builtin_path

        return resolve_builtin_path("builtin://default_model")
    from verl.demo.tiny_model import make_tiny_model_dir

    return make_tiny_model_dir(os.path.join(root, model), **SMOLLM2_135M)


def _worker_rank(index: int, ports: list[int], models: list[str], root: str, repeats: int) -> None:
    """Process 0: the FSDP2 actor (sender); process 1: the standalone HF rollout (receiver). ``ports``: the two
    processes' own worlds, then one transfer group per model."""
    from tests.trainer.ppo_e2e_utils import compose_config
    from verl.workers.roles.actor_rollout_ref import ActorRolloutRefWorker

    os.environ.update(RANK="0", WORLD_SIZE="1", LOCAL_RANK="0", LOCAL_WORLD_SIZE="1", MASTER_ADDR="127.0.0.1")
    os.environ.update(MASTER_PORT=str(ports[index]), TOKENIZERS_PARALLELISM="false")
    results = []
    for model_index, model in enumerate(models):
        path = os.path.join(root, f"{model}.path")
        with open(path) as f:
            model_dir = f.read()
        overrides = [
            f"actor_rollout_ref.model.path={model_dir}",
            f"actor_rollout_ref.hybrid_engine={index == 0}",
            "actor_rollout_ref.actor.strategy=fsdp2",
            "actor_rollout_ref.actor.ppo_mini_batch_size=1",
            "actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu=1",
            "actor_rollout_ref.rollout.name=hf",
            "actor_rollout_ref.rollout.n=1",
            "actor_rollout_ref.rollout.log_prob_micro_batch_size_per_gpu=1",
        ]
        config = compose_config(overrides).actor_rollout_ref
        worker = ActorRolloutRefWorker(config, role="actor" if index == 0 else "rollout")
        worker.init_model()
        worker.init_checkpoint_engine("127.0.0.1", ports[2 + model_index], 2, index)
        if index == 0:  # a warm-up sync, untimed
            worker.send_weights(-1)
        else:
            worker.receive_weights()
        for bucket_mb in BUCKETS_MB:
            worker.checkpoint_engine.bucket_bytes = bucket_mb << 20  # the sender's decides
            runs = []
            for version in range(repeats):
                runs.append(worker.send_weights(version) if index == 0 else worker.receive_weights())
            side = "actor send_weights (gather + send)" if index == 0 else "rollout receive_weights (+ load)"
            results.append(_row("worker_sync", model, bucket_mb, side, runs))
        worker.close_checkpoint_engine()
        del worker
    with open(os.path.join(root, f"worker{index}.jsonl"), "w") as f:
        f.write("\n".join(json.dumps(r) for r in results) + "\n")
    sys.stdout.flush()
    os._exit(0)


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _run_workers(models: list[str], repeats: int) -> None:
    import tempfile

    with tempfile.TemporaryDirectory() as root:
        for model in models:
            with open(os.path.join(root, f"{model}.path"), "w") as f:
                f.write(_model_dir(model, root))
        ports = [_free_port() for _ in range(2 + len(models))]  # each process's world, then one transfer per model
        mp.spawn(_worker_rank, args=(ports, models, root, repeats), nprocs=2, join=True)
        for index in range(2):
            with open(os.path.join(root, f"worker{index}.jsonl")) as f:
                print(f.read(), end="")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--receivers", type=int, default=1)
    parser.add_argument("--models", default="default,smollm2-135m")
    parser.add_argument("--workers", action="store_true", help="time send_weights / receive_weights between workers")
    args = parser.parse_args()
    if args.workers:
        _run_workers(args.models.split(","), args.repeats)
        return
    port = _free_port()
    out = os.path.join(os.environ.get("TMPDIR", "/tmp"), f"bench_checkpoint_engine_{os.getpid()}.jsonl")
    world = 1 + args.receivers
    mp.spawn(_rank, args=(world, port, args.models.split(","), args.repeats, out), nprocs=world, join=True)
    with open(out) as f:
        print(f.read(), end="")
    os.remove(out)


if __name__ == "__main__":
    main()
