"""Throughput of one actor worker on a random-weight model of Qwen2.5-0.5B's shape: generation, log-probs, update.

Builds a seeded random Qwen2 model with Qwen2.5-0.5B's shape (hidden 896, 24 layers, 14 query / 2 KV heads,
MLP 4864, vocabulary 151,936, tied embeddings: 494M parameters), starts one ``ActorRolloutRefWorker`` (FSDP2, HF
rollout, world size 1, in this process: no Ray) from the ``ppo_trainer`` config, and times its three calls on the
same batch: ``generate_sequences`` (``--batch`` random prompts of ``--prompt-length`` tokens, ``--response-length``
new tokens), ``compute_log_prob`` and ``update_actor`` over the generated sequences. One warm-up call each, then the
median of ``--repeats``. Prints one JSON line per phase: tokens/s, achieved TFLOP/s and MFU (FLOPs from
``verl.utils.flops_counter``: 6·N per trained token, 2·N per forward token; MFU against the device's dense bf16
peak; on CPU the host's measured GEMM peak), and peak memory (device bytes on an accelerator, else the process's
peak RSS).

    python scripts/benchmark/bench_gpu_throughput.py                     # on a GPU (Qwen2.5-0.5B shape)
    python scripts/benchmark/bench_gpu_throughput.py --tiny --device cpu  # CPU smoke test (seconds)
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import tempfile
import time

import torch

QWEN25_05B = dict(
    hidden_size=896, num_layers=24, num_heads=14, num_kv_heads=2, intermediate_size=4864, vocab_size=151936,
    tie_word_embeddings=True, max_position_embeddings=32768,
)  # fmt: skip
TINY = dict(hidden_size=64, num_layers=2, num_heads=4, num_kv_heads=2, intermediate_size=128)


def emit(figure: str, **fields) -> None:
    print(json.dumps({"figure": figure, **fields}), flush=True)


def parse_args(argv=None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tiny", action="store_true", help="a 2-layer hidden-64 model and a tiny batch (CPU test)")
    parser.add_argument("--device", choices=["auto", "cpu"], default="auto", help="cpu hides the accelerators")
    parser.add_argument("--batch", type=int, default=None, help="prompts per call (default 64; --tiny: 4)")
    parser.add_argument("--prompt-length", type=int, default=None, help="default 256; --tiny: 16")
    parser.add_argument("--response-length", type=int, default=None, help="default 256; --tiny: 8")
    parser.add_argument("--micro-batch", type=int, default=None, help="per-GPU micro batch (default 16; --tiny: 2)")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--strategy", choices=["fsdp", "fsdp2"], default="fsdp2")
    parser.add_argument("--model-dir", default=None, help="where to write the random model (default: a temp dir)")
    args = parser.parse_args(argv)
    defaults = (4, 16, 8, 2) if args.tiny else (64, 256, 256, 16)
    for name, value in zip(("batch", "prompt_length", "response_length", "micro_batch"), defaults):
        if getattr(args, name) is None:
            setattr(args, name, value)
    return args


def build_worker(args, model_path: str):
    """One actor+rollout worker of world size 1 in this process, configured as the trainer would."""
    from hydra import compose, initialize_config_dir

    import verl.trainer
    from verl.single_controller.base.worker import WorkerHelper
    from verl.workers.roles.actor_rollout_ref import ActorRolloutRefWorker

    overrides = [
        f"actor_rollout_ref.model.path={model_path}",
        "actor_rollout_ref.model.use_remove_padding=True",
        "actor_rollout_ref.model.enable_gradient_checkpointing=True",
        f"actor_rollout_ref.actor.strategy={args.strategy}",
        "actor_rollout_ref.actor.optim.total_training_steps=100",
        f"actor_rollout_ref.actor.ppo_mini_batch_size={args.batch}",
        f"actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu={args.micro_batch}",
        "actor_rollout_ref.actor.use_kl_loss=False",
        "actor_rollout_ref.rollout.name=hf",
        "actor_rollout_ref.rollout.n=1",
        f"actor_rollout_ref.rollout.prompt_length={args.prompt_length}",
        f"actor_rollout_ref.rollout.response_length={args.response_length}",
        f"actor_rollout_ref.rollout.log_prob_micro_batch_size_per_gpu={args.micro_batch}",
        f"data.max_prompt_length={args.prompt_length}",
        f"data.max_response_length={args.response_length}",
    ]
    config_dir = os.path.join(os.path.dirname(verl.trainer.__file__), "config")
    with initialize_config_dir(config_dir=config_dir, version_base=None):
        config = compose(config_name="ppo_trainer", overrides=overrides)
    os.environ.update(
        RANK="0", WORLD_SIZE="1", LOCAL_RANK="0", LOCAL_WORLD_SIZE="1", MASTER_ADDR="127.0.0.1",
        MASTER_PORT=str(WorkerHelper._get_free_port()),
    )  # fmt: skip
    worker = ActorRolloutRefWorker(config.actor_rollout_ref, role="actor_rollout")
    worker.init_model()
    return worker


def random_prompts(tokenizer, batch: int, length: int, vocab: int):
    """Left-padded prompts of random tokens, lengths between ``length/2`` and ``length``."""
    from verl import DataProto
    from verl.utils.model import compute_position_id_with_mask

    g = torch.Generator().manual_seed(0)
    lengths = torch.randint(max(1, length // 2), length + 1, (batch,), generator=g)
    mask = (torch.arange(length).unsqueeze(0) >= length - lengths.unsqueeze(1)).long()
    ids = torch.randint(3, vocab, (batch, length), generator=g) * mask + tokenizer.pad_token_id * (1 - mask)
    tensors = {"input_ids": ids, "attention_mask": mask, "position_ids": compute_position_id_with_mask(mask)}
    meta = {"eos_token_id": tokenizer.eos_token_id, "pad_token_id": tokenizer.pad_token_id, "do_sample": True}
    return DataProto.from_dict(tensors=tensors, meta_info=meta)


class PeakMemory:
    """Peak device memory of a phase on an accelerator (reset before it), else the process's peak RSS so far."""

    def __init__(self) -> None:
        from verl.utils.device import get_torch_device, is_accelerator_available

        self.device = get_torch_device() if is_accelerator_available() else None

    def reset(self) -> None:
        if self.device is not None:
            self.device.synchronize()
            self.device.reset_peak_memory_stats()

    def read(self) -> dict:
        from verl.utils.device import peak_rss_gb

        if self.device is not None:
            self.device.synchronize()
            return {"peak_device_gb": round(self.device.max_memory_allocated() / 2**30, 3)}
        return {"peak_rss_gb": round(peak_rss_gb(), 3)}


def timed(fn, repeats: int, memory: PeakMemory) -> tuple[float, object, dict]:
    """Median seconds of ``repeats`` calls after one warm-up; the last result; the peak memory of those calls."""
    fn()
    memory.reset()
    seconds, result = [], None
    for _ in range(repeats):
        start = time.perf_counter()
        result = fn()
        if memory.device is not None:
            memory.device.synchronize()
        seconds.append(time.perf_counter() - start)
    return statistics.median(seconds), result, memory.read()


def run(args) -> list[dict]:
    """Build the model and the worker, time the three phases, emit and return one figure per phase."""
    from verl.demo.tiny_model import make_tiny_model_dir
    from verl.utils.device import get_device_name
    from verl.utils.flops_counter import FlopsCounter
    from verl.utils.peak_flops import device_peak
    from verl.workers.engine.fsdp.setup import attn_implementation

    shape = TINY if args.tiny else QWEN25_05B
    with tempfile.TemporaryDirectory() as tmp:
        model_path = make_tiny_model_dir(args.model_dir or os.path.join(tmp, "model"), **shape)
        worker = build_worker(args, model_path)
        hf_config = worker.hf_config
        n_params = sum(p.numel() for p in worker.actor_module.parameters())
        memory = PeakMemory()
        prompts = random_prompts(worker.tokenizer, args.batch, args.prompt_length, len(worker.tokenizer))

        gen_s, generated, gen_mem = timed(lambda: worker.generate_sequences(prompts), args.repeats, memory)
        seqlens = generated.batch["attention_mask"].sum(-1).tolist()
        new_tokens = int(generated.batch["attention_mask"][:, args.prompt_length :].sum())
        generated.meta_info["global_token_num"] = seqlens
        lp_s, log_probs, lp_mem = timed(lambda: worker.compute_log_prob(generated), args.repeats, memory)
        generated.batch["old_log_probs"] = log_probs.batch["old_log_probs"]
        generated.batch["advantages"] = torch.randn_like(log_probs.batch["old_log_probs"])
        generated.batch["response_mask"] = generated.batch["attention_mask"][:, args.prompt_length :]
        up_s, _, up_mem = timed(lambda: worker.update_actor(generated), args.repeats, memory)

    device = get_device_name()
    # one device's peak: a GPU's datasheet figure, or this CPU host's measured GEMM peak (the worker uses every core)
    peak = device_peak(device, torch.float32 if device == "cpu" else torch.bfloat16)
    counter = FlopsCounter(hf_config)
    train_tflops = counter.estimate_flops(seqlens, up_s)[0]
    forward_tflops = counter.estimate_flops(seqlens, lp_s)[0] / 3  # a forward pass is a third of fwd+bwd
    gen_tflops = 2 * n_params * sum(seqlens) / gen_s / 1e12  # prefill + decode, weights only (attention excluded)
    common = {
        "device": get_device_name(),
        "accelerator": torch.cuda.get_device_name() if get_device_name() == "cuda" else None,
        "params_m": round(n_params / 1e6, 1),
        "shape": "tiny" if args.tiny else "qwen2.5-0.5b",
        "strategy": args.strategy,
        "attn": attn_implementation(),
        "batch": args.batch,
        "prompt_length": args.prompt_length,
        "response_length": args.response_length,
        "torch": torch.__version__,
    }
    figures = []
    for phase, seconds, tokens, tflops, mem in (
        ("generate", gen_s, new_tokens, gen_tflops, gen_mem),
        ("compute_log_prob", lp_s, sum(seqlens), forward_tflops, lp_mem),
        ("update_actor", up_s, sum(seqlens), train_tflops, up_mem),
    ):
        mfu = 0.0 if peak is None else tflops * 1e12 / peak.flops
        figure = {
            "seconds": round(seconds, 4),
            "tokens": tokens,
            "tokens_per_s": round(tokens / seconds, 1),
            "tflops": float(f"{tflops:.4g}"),
            "mfu": float(f"{mfu:.4g}"),
            "peak_source": peak.source if peak is not None else None,
            **mem,
            **common,
        }
        emit(f"gpu_throughput_{phase}", **figure)
        figures.append({"phase": phase, **figure})
    return figures


def main(argv=None) -> None:
    args = parse_args(argv)
    if args.device == "cpu":
        os.environ["CUDA_VISIBLE_DEVICES"] = ""  # before torch initialises CUDA (verl.utils.device reads it)
    run(args)


if __name__ == "__main__":
    main()
