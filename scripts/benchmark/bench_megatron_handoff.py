"""The Megatron engine's hand-off stream: time and peak extra memory against the weights' size, on CPU with gloo.

Two processes hold a Qwen2-shaped model (default: hidden 512, 8 layers, vocabulary 32000, fp32) at tensor parallel
2 (or pipeline parallel 2). Rank 0 reports, as one JSON line per figure:
  (a) streaming: ``MegatronEngine.hf_weights()`` consumed tensor by tensor, as a rollout's loader does; its time and
      the peak rise of the process's resident memory while it runs;
  (b) the baseline in the same run: the same stream kept whole (a second full copy, what a state-dict gather
      builds), its peak rise;
and the weights' full size, the largest single layer's size and the ratio (a) / (b) of the peaks.
Usage: python scripts/benchmark/bench_megatron_handoff.py [--tp 2] [--pp 1] [--hidden 512] [--layers 8]
"""

from __future__ import annotations

import argparse
import json
import os
import socket
import tempfile
import threading
import time

import psutil
import torch
import torch.distributed as dist
import torch.multiprocessing as mp


class PeakRss:
    """The peak resident memory of this process while the block runs (sampled every millisecond), in MB above the
    level at entry."""

    def __enter__(self):
        self.process = psutil.Process()
        self.start = self.peak = self.process.memory_info().rss
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._sample, daemon=True)
        self._thread.start()
        return self

    def _sample(self):
        while not self._stop.is_set():
            self.peak = max(self.peak, self.process.memory_info().rss)
            time.sleep(0.001)

    def __exit__(self, *exc):
        self._stop.set()
        self._thread.join()
        self.peak = max(self.peak, self.process.memory_info().rss)
        self.extra_mb = (self.peak - self.start) / 2**20


def _rank(rank: int, world: int, port: int, args, model_dir: str) -> None:
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port), RANK=str(rank), WORLD_SIZE=str(world))
    dist.init_process_group("gloo", rank=rank, world_size=world)
    torch.set_num_threads(1)
    from transformers import AutoConfig

    from verl.workers.engine.megatron.engine import MegatronEngine
    from verl.workers.engine.megatron.model import build_gpt_model, transformer_config
    from verl.workers.engine.megatron.parallel import init_model_parallel
    from verl.workers.engine.megatron.weights import hf_layer_names, load_hf_weights

    init_model_parallel(args.tp, args.pp, seed=1)
    from megatron.core import parallel_state

    hf_config = AutoConfig.from_pretrained(model_dir)
    config = transformer_config(hf_config, tp_size=args.tp, pp_size=args.pp)
    model = build_gpt_model(
        hf_config,
        config,
        pre_process=parallel_state.is_pipeline_first_stage(),
        post_process=parallel_state.is_pipeline_last_stage(),
    )
    load_hf_weights(model, hf_config, model_dir)
    engine = MegatronEngine(model, hf_config)
    dist.barrier()

    start = time.perf_counter()
    total = 0
    with PeakRss() as streamed:
        for _, tensor in engine.hf_weights():
            total += tensor.numel() * tensor.element_size()
            del tensor
    stream_s = time.perf_counter() - start
    dist.barrier()
    with PeakRss() as whole:
        kept = dict(engine.hf_weights())
    layer_names = set(hf_layer_names(0, bool(config.add_qkv_bias)))
    largest_layer = sum(t.numel() * t.element_size() for n, t in kept.items() if n in layer_names)
    largest_tensor = max(t.numel() * t.element_size() for t in kept.values())
    del kept
    if rank == 0:
        common = {"tp": args.tp, "pp": args.pp, "weights_mb": round(total / 2**20, 1)}
        figures = [
            {"figure": "handoff_stream", "seconds": round(stream_s, 3), "peak_extra_mb": round(streamed.extra_mb, 1)},
            {"figure": "handoff_full_copy_baseline", "peak_extra_mb": round(whole.extra_mb, 1)},
            {
                "figure": "handoff_peak_ratio",
                "stream_over_full_copy": round(streamed.extra_mb / max(whole.extra_mb, 1e-9), 3),
                "largest_layer_mb": round(largest_layer / 2**20, 1),
                "largest_tensor_mb": round(largest_tensor / 2**20, 1),
            },
        ]
        for figure in figures:
            print(json.dumps({**figure, **common}), flush=True)
    dist.barrier()
    dist.destroy_process_group()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tp", type=int, default=2)
    parser.add_argument("--pp", type=int, default=1)
    parser.add_argument("--hidden", type=int, default=512)
    parser.add_argument("--layers", type=int, default=8)
    parser.add_argument("--vocab", type=int, default=32000)
    args = parser.parse_args()
    from verl.demo.tiny_model import make_tiny_model_dir

    with tempfile.TemporaryDirectory() as tmp:
        model_dir = make_tiny_model_dir(
            os.path.join(tmp, "model"),
            hidden_size=args.hidden,
            num_layers=args.layers,
            num_heads=8,
            num_kv_heads=4,
            intermediate_size=args.hidden * 11 // 4,
            vocab_size=args.vocab,
        )
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            port = s.getsockname()[1]
        world = args.tp * args.pp
        # a fixed mmap threshold: glibc then returns every large freed block to the OS at once, so the resident
        # memory follows what is alive (its default raises the threshold after frees and keeps freed blocks)
        os.environ.setdefault("MALLOC_MMAP_THRESHOLD_", str(128 * 1024))
        mp.spawn(_rank, args=(world, port, args, model_dir), nprocs=world, join=True)


if __name__ == "__main__":
    main()
