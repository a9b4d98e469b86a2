"""The packed path (``use_remove_padding=True``) against the padded one on the same batch, in one process.

Times the actor's two compute phases on the same rows and the same model: log-probs (``compute_log_prob``, no grad:
what the reference and old-log-prob passes run) and one update (``update_policy``: forward, backward, optimizer
step), for two batches: every response at the length limit (nothing for packing to remove) and responses of varied
length (uniform between 1/8 and all of the limit). Rounds interleave padded and packed so that a loaded machine
slows both alike. Prints one JSON line per figure: each side's median seconds (wall clock, and the process's CPU
time, which a machine shared with other jobs inflates less), the padding share of the batch, and the ratios
padded / packed (above 1: packing is faster).

``--role reward_model`` times the reward model's scoring instead (``score_sequences``, what ``compute_rm_score``
runs, on a token-classification model of the same size), with the largest score difference between the two paths.

    python scripts/benchmark/bench_packed.py [--role actor] [--size 25m] [--rows 32] [--micro 8] [--response 128]
        [--rounds 3]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
import time

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", ".."))

import torch  # noqa: E402
from omegaconf import OmegaConf  # noqa: E402

sys.path.insert(0, os.path.dirname(__file__))
from bench_vs_trl import SIZES as TRL_SIZES  # noqa: E402

from verl.protocol import DataProto  # noqa: E402
from verl.utils.model import compute_position_id_with_mask  # noqa: E402

# the 25m and 135m shapes of bench_vs_trl.py, and a tiny one for a quick look
SIZES = {
    "tiny": {"hidden_size": 128, "num_layers": 2, "num_heads": 4, "num_kv_heads": 2, "intermediate_size": 256},
    **TRL_SIZES,
}


def emit(figure: str, value, **fields) -> None:
    print(json.dumps({"figure": figure, "value": value, **fields}), flush=True)


def rollout_batch(rows: int, prompt: int, response: int, vocab: int, varied: bool, seed: int = 0) -> DataProto:
    """verl's rollout layout: left-padded prompts (``prompt/2`` to ``prompt`` tokens), right-padded responses."""
    g = torch.Generator().manual_seed(seed)
    prompt_lens = torch.randint(prompt // 2, prompt + 1, (rows,), generator=g)
    if varied:
        response_lens = torch.randint(max(1, response // 8), response + 1, (rows,), generator=g)
    else:
        response_lens = torch.full((rows,), response)
    mask = torch.zeros(rows, prompt + response, dtype=torch.long)
    for i in range(rows):
        mask[i, prompt - int(prompt_lens[i]) : prompt + int(response_lens[i])] = 1
    input_ids = torch.randint(0, vocab, (rows, prompt + response), generator=g) * mask
    batch = {
        "input_ids": input_ids,
        "attention_mask": mask,
        "position_ids": compute_position_id_with_mask(mask),
        "responses": input_ids[:, prompt:],
        "response_mask": mask[:, prompt:],
        "old_log_probs": -torch.rand(rows, response, generator=g) - 1.0,
        "advantages": torch.randn(rows, response, generator=g),
        "ref_log_prob": -torch.rand(rows, response, generator=g) - 1.0,
    }
    return DataProto.from_dict(tensors=batch, meta_info={"temperature": 1.0})


def actor_config(rows: int, micro: int, packed: bool):
    return OmegaConf.create(
        {
            "strategy": "fsdp",
            "ppo_mini_batch_size": rows,
            "ppo_micro_batch_size_per_gpu": micro,
            "use_dynamic_bsz": False,
            "grad_clip": 1.0,
            "clip_ratio": 0.2,
            "policy_loss": {"loss_mode": "vanilla"},
            "loss_agg_mode": "token-mean",
            "entropy_coeff": 0.0,
            "use_kl_loss": True,
            "kl_loss_coef": 0.001,
            "kl_loss_type": "low_var_kl",
            "ppo_epochs": 1,
            "shuffle": False,
            "use_remove_padding": packed,
        }
    )


def add_batch_arguments(parser: argparse.ArgumentParser) -> None:
    """The model size, the rows and the rounds, as both CPU benchmarks of the actor take them."""
    parser.add_argument("--size", choices=sorted(SIZES), default="25m")
    parser.add_argument("--rows", type=int, default=32)
    parser.add_argument("--micro", type=int, default=8)
    parser.add_argument("--prompt", type=int, default=32)
    parser.add_argument("--response", type=int, default=128)
    parser.add_argument("--rounds", type=int, default=3)


def time_phases(actor, data: DataProto, times: dict | None, mode: str, sync=lambda: None) -> torch.Tensor:
    """Run ``actor``'s log-prob pass and one update on ``data``; add their wall and CPU seconds to ``times`` under
    ``(mode, phase, clock)`` (None: a warm-up). ``sync`` runs before each reading. Returns the log-probs."""
    sync()
    start = (time.perf_counter(), time.process_time())
    log_probs, _ = actor.compute_log_prob(data)
    sync()
    mid = (time.perf_counter(), time.process_time())
    actor.update_policy(data)
    sync()
    end = (time.perf_counter(), time.process_time())
    for clock, name in enumerate(("wall", "cpu") if times is not None else ()):
        times.setdefault((mode, "log_prob", name), []).append(mid[clock] - start[clock])
        times.setdefault((mode, "update", name), []).append(end[clock] - mid[clock])
    return log_probs


def emit_ratios(times: dict, baseline: str, other: str, **fields) -> None:
    """Medians of each phase and clock for both modes, and the ratio ``baseline / other``."""
    for phase in ("log_prob", "update"):
        for clock in ("wall", "cpu"):
            base = statistics.median(times[(baseline, phase, clock)])
            new = statistics.median(times[(other, phase, clock)])
            emit(f"{phase}_s", {baseline: round(base, 3), other: round(new, 3)}, clock=clock, **fields)
            emit(f"{phase}_ratio_{baseline}_over_{other}", round(base / new, 3), clock=clock, **fields)


def bench_reward_model(args, common: dict) -> None:
    """Padded against packed ``score_sequences`` (the reward-model worker's forward) on the same rows and model."""
    from transformers import AutoModelForTokenClassification

    from verl.demo.tiny_model import make_tiny_model_dir
    from verl.workers.engine.fsdp.hf_forward import score_sequences

    root = tempfile.mkdtemp(prefix="bench_packed_rm_")
    path = make_tiny_model_dir(os.path.join(root, "rm"), head="token_classification", **SIZES[args.size])
    dtype = torch.bfloat16 if args.dtype == "bf16" else torch.float32
    model = AutoModelForTokenClassification.from_pretrained(path, dtype=dtype, attn_implementation="sdpa").eval()
    vocab = model.config.vocab_size
    for kind in args.batches.split(","):
        data = rollout_batch(args.rows, args.prompt, args.response, vocab, varied=kind == "varied")
        inputs = data.batch.select("input_ids", "attention_mask", "position_ids")
        mask = inputs["attention_mask"]
        emit("padding_share", round(1 - float(mask[:, mask.any(0)].float().mean()), 3), batch=kind, **common)
        times: dict[tuple[str, str, str], list[float]] = {}
        for round_index in range(args.rounds + 1):  # round 0 warms up
            scores = {}
            for name in ("padded", "packed"):
                start = (time.perf_counter(), time.process_time())
                scores[name] = score_sequences(model, inputs, args.micro, use_remove_padding=name == "packed")
                end = (time.perf_counter(), time.process_time())
                for clock, clock_name in enumerate(("wall", "cpu") if round_index else ()):
                    times.setdefault((name, "score", clock_name), []).append(end[clock] - start[clock])
            if round_index == 0:
                diff = (scores["padded"] - scores["packed"]).abs().max().item()
                emit("score_max_abs_diff", diff, batch=kind, **common)
        for clock in ("wall", "cpu"):
            padded = statistics.median(times[("padded", "score", clock)])
            packed = statistics.median(times[("packed", "score", clock)])
            emit("score_s", {"padded": round(padded, 4), "packed": round(packed, 4)}, clock=clock, batch=kind, **common)
            emit("score_ratio_padded_over_packed", round(padded / packed, 3), clock=clock, batch=kind, **common)


def main() -> None:
    parser = argparse.ArgumentParser()
    add_batch_arguments(parser)
    parser.add_argument("--role", choices=["actor", "reward_model"], default="actor")
    parser.add_argument("--dtype", choices=["fp32", "bf16"], default="fp32")
    parser.add_argument("--no-grad-ckpt", action="store_true", help="gradient checkpointing is on by default")
    parser.add_argument("--batches", default="full,varied")
    parser.add_argument("--threads", type=int, default=0, help="torch threads (0: torch's default)")
    args = parser.parse_args()
    if args.threads:
        torch.set_num_threads(args.threads)
    if args.role == "reward_model":
        common = {"role": "reward_model", "size": args.size, "rows": args.rows, "micro": args.micro}
        bench_reward_model(args, {**common, "dtype": args.dtype, "threads": torch.get_num_threads()})
        return

    from transformers import AutoModelForCausalLM

    from verl.demo.tiny_model import make_tiny_model_dir
    from verl.workers.actor import DataParallelPPOActor

    path = make_tiny_model_dir(os.path.join(tempfile.mkdtemp(prefix="bench_packed_"), "model"), **SIZES[args.size])
    dtype = torch.bfloat16 if args.dtype == "bf16" else torch.float32
    model = AutoModelForCausalLM.from_pretrained(path, dtype=dtype, attn_implementation="sdpa")
    if not args.no_grad_ckpt:
        model.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": False})
    # a learning rate of 0 keeps the weights (and so every round's work) the same
    optimizer = torch.optim.AdamW(model.parameters(), lr=0.0)
    actors = {
        name: DataParallelPPOActor(actor_config(args.rows, args.micro, name == "packed"), model, optimizer)
        for name in ("padded", "packed")
    }
    vocab = model.config.vocab_size
    common = {"size": args.size, "rows": args.rows, "micro": args.micro, "dtype": args.dtype}
    common["threads"] = torch.get_num_threads()
    for kind in args.batches.split(","):
        data = rollout_batch(args.rows, args.prompt, args.response, vocab, varied=kind == "varied")
        data.meta_info.update(micro_batch_size=args.micro, use_dynamic_bsz=False, temperature=1.0)
        mask = data.batch["attention_mask"]
        trimmed = mask[:, mask.any(0)]
        emit("padding_share", round(1 - float(trimmed.float().mean()), 3), batch=kind, **common)
        times: dict[tuple[str, str, str], list[float]] = {}
        for round_index in range(args.rounds + 1):  # round 0 warms up
            for name, actor in actors.items():
                log_probs = time_phases(actor, data, times if round_index else None, name)
                if name == "padded":
                    reference = log_probs
                elif round_index == 0:
                    response_mask = data.batch["response_mask"].bool()
                    diff = (reference - log_probs)[response_mask].abs().max().item()
                    emit("log_prob_max_abs_diff", diff, batch=kind, **common)
        emit_ratios(times, "padded", "packed", batch=kind, **common)


if __name__ == "__main__":
    main()
