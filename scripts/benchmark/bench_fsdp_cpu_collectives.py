"""FSDP2 over two CPU ranks (gloo): per-micro-batch collectives against once per mini batch / log-prob pass.

Each rank holds half of the rows and one thread, as two Ray CPU workers do. Times the actor's log-prob pass (what
the reference pass runs) and one update on the same rows, in rounds alternating FSDP2's default (all-gather in each
micro batch's forward and backward, reduce-scatter after each backward) with the engine's CPU mode
(:class:`verl.utils.fsdp_utils.FSDP2Accumulation`, and one gather per log-prob pass). Prints one JSON line per
figure from rank 0: medians of wall and CPU seconds, and the ratio default / few (above 1: the CPU mode is faster).

    python scripts/benchmark/bench_fsdp_cpu_collectives.py [--size 25m] [--rows 32] [--micro 8] [--rounds 3]
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", ".."))
sys.path.insert(0, os.path.dirname(__file__))

import torch  # noqa: E402
import torch.distributed as dist  # noqa: E402
import torch.multiprocessing as mp  # noqa: E402
from bench_packed import SIZES, actor_config, add_batch_arguments, emit_ratios, rollout_batch, time_phases  # noqa: E402

WORLD = 2


def _rank(rank: int, args, path: str, port: int) -> None:
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port), RANK=str(rank), WORLD_SIZE=str(WORLD))
    torch.set_num_threads(1)
    dist.init_process_group("gloo", rank=rank, world_size=WORLD)
    from torch.distributed.device_mesh import init_device_mesh
    from transformers import AutoModelForCausalLM

    from verl.utils.fsdp_utils import FSDP2Accumulation, wrap_model_for_training
    from verl.workers.actor import DataParallelPPOActor

    model = AutoModelForCausalLM.from_pretrained(path, attn_implementation="sdpa")
    model.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": False})
    mesh = init_device_mesh("cpu", (WORLD,), mesh_dim_names=("fsdp",))
    model = wrap_model_for_training(model, "fsdp2", mesh)
    optimizer = torch.optim.AdamW(model.parameters(), lr=0.0)
    per_rank = args.rows // WORLD
    actor = DataParallelPPOActor(actor_config(per_rank, args.micro, packed=True), model, optimizer)
    engine = actor.engine
    data = rollout_batch(args.rows, args.prompt, args.response, model.config.vocab_size, varied=False)
    data = data.chunk(WORLD)[rank]
    data.meta_info.update(micro_batch_size=args.micro, use_dynamic_bsz=False, temperature=1.0)
    times: dict[tuple[str, str, str], list[float]] = {}
    for round_index in range(args.rounds + 1):  # round 0 warms up
        for mode in ("default", "few"):
            engine._few_collectives = mode == "few"
            engine._accumulation = FSDP2Accumulation(engine.module) if mode == "few" else None
            time_phases(actor, data, times if round_index else None, mode, sync=dist.barrier)
    if rank == 0:
        common = {"size": args.size, "rows": args.rows, "micro": args.micro, "ranks": WORLD, "threads_per_rank": 1}
        emit_ratios(times, "default", "few", **common)
    dist.destroy_process_group()


def main() -> None:
    parser = argparse.ArgumentParser()
    add_batch_arguments(parser)
    parser.add_argument("--port", type=int, default=29561)
    args = parser.parse_args()
    from verl.demo.tiny_model import make_tiny_model_dir

    path = make_tiny_model_dir(os.path.join(tempfile.mkdtemp(prefix="bench_fsdp_"), "model"), **SIZES[args.size])
    mp.spawn(_rank, args=(args, path, args.port), nprocs=WORLD)


if __name__ == "__main__":
    main()
