"""Peak memory of log-probs + entropy from logits: chunked ``verl_F`` vs the naive full-size form.

Naive: ``log_softmax(logits.float())`` gathered at the labels and ``-(softmax * log_softmax).sum(-1)``.
Ours: ``verl_F.logprobs_from_logits`` and ``verl_F.entropy_from_logits`` (row-chunked, hand-written backward).
Each figure is measured in a fresh subprocess: on CUDA with ``torch.cuda.max_memory_allocated``; on CPU with
the kernel's peak resident set size (VmHWM, reset through /proc/self/clear_refs right before the call).
Prints one JSON line per figure with the extra peak bytes beyond the inputs and the ratio ours / naive.

    python scripts/benchmark/bench_logprobs_memory.py [--tokens 2048] [--vocab 32000] [--dtype float32]
"""

from __future__ import annotations

import argparse
import json
import os
import re
import subprocess
import sys
from pathlib import Path


def _rss(key: str) -> int:
    return int(re.search(key + r":\s+(\d+) kB", Path("/proc/self/status").read_text()).group(1)) * 1024


def worker(mode: str, backward: bool, tokens: int, vocab: int, dtype_name: str, device: str) -> int:
    """Run one measurement in this process; returns the extra peak bytes."""
    import torch
    import torch.nn.functional as F

    from verl.utils import torch_functional as verl_F

    dtype = getattr(torch, dtype_name)

    def run(logits, labels):
        if mode == "naive":
            logp_all = F.log_softmax(logits.float(), dim=-1)
            lp = logp_all.gather(-1, labels.unsqueeze(-1)).squeeze(-1)
            ent = -(logp_all.exp() * logp_all).sum(-1)
        else:
            lp = verl_F.logprobs_from_logits(logits, labels)
            ent = verl_F.entropy_from_logits(logits)
        if backward:
            (lp.float().sum() + ent.float().sum()).backward()

    small = torch.randn(8, 64, device=device, dtype=dtype, requires_grad=backward)
    run(small, torch.zeros(8, dtype=torch.long, device=device))  # warm-up
    logits = torch.randn(tokens, vocab, device=device, dtype=dtype).requires_grad_(backward)
    labels = torch.randint(0, vocab, (tokens,), device=device)
    if device == "cuda":
        torch.cuda.synchronize()
        torch.cuda.reset_peak_memory_stats()
        before = torch.cuda.memory_allocated()
        run(logits, labels)
        torch.cuda.synchronize()
        return torch.cuda.max_memory_allocated() - before
    Path("/proc/self/clear_refs").write_text("5")
    before = _rss("VmRSS")
    run(logits, labels)
    return _rss("VmHWM") - before


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--tokens", type=int, default=2048, help="rows of the flattened (tokens, vocab) logits")
    parser.add_argument("--vocab", type=int, default=32000)
    parser.add_argument("--dtype", default="float32", choices=["float32", "bfloat16", "float16"])
    parser.add_argument("--device", default=None, help="cuda or cpu (default: cuda when available)")
    parser.add_argument("--worker", nargs=2, metavar=("MODE", "BACKWARD"), help=argparse.SUPPRESS)
    args = parser.parse_args()

    if args.device is None:
        import torch

        args.device = "cuda" if torch.cuda.is_available() else "cpu"
    if args.worker:
        mode, backward = args.worker[0], args.worker[1] == "1"
        print(worker(mode, backward, args.tokens, args.vocab, args.dtype, args.device))
        return

    repo = Path(__file__).resolve().parents[2]
    # small malloc threshold so freed CPU buffers go back to the OS and the RSS peak is the true peak
    env = {**os.environ, "MALLOC_MMAP_THRESHOLD_": "65536", "PYTHONPATH": f"{repo}:{os.environ.get('PYTHONPATH', '')}"}
    itemsize = {"float32": 4, "bfloat16": 2, "float16": 2}[args.dtype]
    logits_bytes = args.tokens * args.vocab * itemsize
    for backward in (False, True):
        peaks = {}
        for mode in ("naive", "chunked"):
            cmd = [sys.executable, __file__, "--tokens", str(args.tokens), "--vocab", str(args.vocab)]
            cmd += ["--dtype", args.dtype, "--device", args.device, "--worker", mode, str(int(backward))]
            out = subprocess.run(cmd, capture_output=True, text=True, env=env, check=True)
            peaks[mode] = int(out.stdout.strip().splitlines()[-1])
        record = {
            "figure": f"logprob_entropy_peak_{'fwd_bwd' if backward else 'fwd'}",
            "device": args.device,
            "dtype": args.dtype,
            "logits_shape": [args.tokens, args.vocab],
            "logits_bytes": logits_bytes,
            "naive_peak_extra_bytes": peaks["naive"],
            "ours_peak_extra_bytes": peaks["chunked"],
            "ratio_ours_over_naive": round(peaks["chunked"] / max(peaks["naive"], 1), 4),
            "measure": "cuda.max_memory_allocated" if args.device == "cuda" else "VmHWM (peak RSS)",
        }
        print(json.dumps(record), flush=True)


if __name__ == "__main__":
    main()
