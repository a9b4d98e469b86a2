"""Two ways to give a vLLM engine the LoRA actor's current adapter, measured on one model in one process.

* ``merged`` (what the rollout does): the hand-off folds every adapter into its base weight as the weights stream
  into a plain engine (``FSDPVLLMShardingManager`` + ``lora_merge``); generation runs the base architecture.
* ``lora_request``: the engine is built with ``enable_lora``; each step writes the adapter (PEFT format, to
  /dev/shm) and registers it under a new id (``add_lora``); generation applies it with vLLM's LoRA kernels.

    python scripts/benchmark/bench_lora_handoff.py [--shape smollm2-135m|tiny] [--rank 16] [--prompts 16]
                                                   [--tokens 64] [--steps 3]

Every step perturbs the adapter (as a training step would), hands it off both ways and generates the same greedy
batch. Prints one JSON line per path (median hand-off seconds, median generation seconds and tokens per second over
the steps after the first) and the share of greedy tokens on which the two paths agree.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import sys
import tempfile
import time

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, REPO)

from scripts.benchmark.bench_agent_loop import SHAPES  # noqa: E402


def _engine(model_dir: str, args, **kwargs):
    from vllm import LLM

    os.environ["VLLM_ENABLE_V1_MULTIPROCESSING"] = "0"
    return LLM(
        model=model_dir,
        dtype="float32",
        enforce_eager=True,
        max_model_len=128,
        max_num_seqs=args.prompts,
        kv_cache_memory_bytes=256 << 20,
        distributed_executor_backend="uni",
        seed=0,
        **kwargs,
    )


def _generate(llm, prompts, tokens, lora_request=None) -> tuple[float, list[list[int]]]:
    from vllm import SamplingParams

    params = SamplingParams(max_tokens=tokens, temperature=0, ignore_eos=True)
    start = time.perf_counter()
    outputs = llm.generate(prompts, params, lora_request=lora_request, use_tqdm=False)
    return time.perf_counter() - start, [list(o.outputs[0].token_ids) for o in outputs]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--shape", choices=sorted(SHAPES), default="smollm2-135m")
    parser.add_argument("--rank", type=int, default=16)
    parser.add_argument("--prompts", type=int, default=16)
    parser.add_argument("--tokens", type=int, default=64)
    parser.add_argument("--steps", type=int, default=3)
    args = parser.parse_args()

    import torch
    from omegaconf import OmegaConf
    from transformers import AutoModelForCausalLM
    from vllm.lora.request import LoRARequest

    from verl.demo.tiny_model import make_tiny_model_dir
    from verl.workers.engine.fsdp.setup import apply_lora
    from verl.workers.sharding_manager.fsdp_vllm import FSDPVLLMShardingManager

    torch.set_num_threads(os.cpu_count() or 1)
    work = tempfile.mkdtemp()
    model_dir = make_tiny_model_dir(os.path.join(work, "model"), **SHAPES[args.shape])
    lora = OmegaConf.create({"lora_rank": args.rank, "lora_alpha": 2 * args.rank, "target_modules": "all-linear"})
    peft_model = apply_lora(AutoModelForCausalLM.from_pretrained(model_dir, dtype=torch.float32), lora).eval()
    merged_engine = _engine(model_dir, args, load_format="dummy")
    manager = FSDPVLLMShardingManager(peft_model, merged_engine, peft_model.config)
    lora_engine = _engine(model_dir, args, enable_lora=True, max_lora_rank=args.rank, max_loras=1)
    prompts = [{"prompt_token_ids": [10 + i, 20 + i, 30 + i, 40 + i]} for i in range(args.prompts)]
    adapters = tempfile.mkdtemp(dir="/dev/shm" if os.path.isdir("/dev/shm") else None)
    figures = {"merged": {"handoff": [], "generate": []}, "lora_request": {"handoff": [], "generate": []}}
    agree = total = 0
    g = torch.Generator().manual_seed(0)
    try:
        for step in range(args.steps):
            with torch.no_grad():  # a training step moves the adapter
                for name, param in peft_model.named_parameters():
                    if "lora_" in name:
                        param.copy_(torch.randn(param.shape, generator=g) * 0.05)
            start = time.perf_counter()
            with manager:
                figures["merged"]["handoff"].append(time.perf_counter() - start)
                seconds, merged_ids = _generate(merged_engine, prompts, args.tokens)
            figures["merged"]["generate"].append(seconds)

            start = time.perf_counter()
            path = os.path.join(adapters, f"step{step}")
            peft_model.save_pretrained(path)
            request = LoRARequest(f"actor_step{step}", step + 1, path)
            if step:
                lora_engine.llm_engine.remove_lora(step)  # the previous step's adapter
            lora_engine.llm_engine.add_lora(request)
            figures["lora_request"]["handoff"].append(time.perf_counter() - start)
            seconds, lora_ids = _generate(lora_engine, prompts, args.tokens, request)
            figures["lora_request"]["generate"].append(seconds)
            for a, b in zip(merged_ids, lora_ids):
                agree += sum(x == y for x, y in zip(a, b))
                total += len(a)
    finally:
        shutil.rmtree(adapters, ignore_errors=True)
    tokens = args.prompts * args.tokens
    for path_name, values in figures.items():
        kept = {key: series[1:] or series for key, series in values.items()}  # the first step warms up
        generate = statistics.median(kept["generate"])
        summary = {
            "path": path_name,
            "shape": args.shape,
            "rank": args.rank,
            "handoff_seconds": round(statistics.median(kept["handoff"]), 3),
            "generate_seconds": round(generate, 2),
            "generated_tokens_per_s": round(tokens / generate, 1),
        }
        print(json.dumps(summary), flush=True)
    print(json.dumps({"greedy_token_agreement": round(agree / max(1, total), 4)}), flush=True)


if __name__ == "__main__":
    main()
