"""Agent-loop serving on the vLLM rollout: ``rollout.mode=sync`` (the turns that are ready go to the engine in one
batched call) against ``mode=async`` (each turn its own request, continuously batched), on one simulated workload.

    python scripts/benchmark/bench_agent_loop.py [--shape smollm2-135m|tiny] [--trajectories 32] [--turns 3]
                                                 [--min-turn 16] [--max-turn 96] [--tool-latency 0.2] [--repeats 2]

Every trajectory plays ``--turns`` assistant turns; each turn's token budget is drawn from [min, max] per
trajectory and turn (greedy decoding; a turn also ends at the end-of-turn token), and after each turn a simulated
tool answers after a latency drawn from [0, 2 x --tool-latency] s with a fixed tool message. Both modes run the same
plans on the same engine (random weights of the shape; the vLLM engine's dummy weights), through the real
``AgentLoopRollout``. Prints one JSON line per mode (median wall time over repeats, generated tokens per second,
engine calls) and the ratio sync / async of the wall times.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import random
import statistics
import sys
import tempfile
import time

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, REPO)

from scripts.benchmark.shapes import SMOLLM2_135M  # noqa: E402

SHAPES = {
    "smollm2-135m": SMOLLM2_135M,  # the real vocabulary size; the project's tokenizer uses its first ids
    "tiny": dict(hidden_size=128, num_layers=2, num_heads=4, num_kv_heads=2, intermediate_size=256),
}
TOOL_MESSAGE = "<tool_response>\nresult=42\n</tool_response>"


def _register_simulated_loop():
    from verl.multi_turn.agent_loop import AgentLoopBase, AgentLoopOutput, register, registered_agent_loops

    if "simulated_tool_agent" in registered_agent_loops():
        return

    @register("simulated_tool_agent")
    class SimulatedToolAgentLoop(AgentLoopBase):
        """Turns of planned budgets, each followed by a tool that answers after a planned latency."""

        async def run(self, **kwargs) -> AgentLoopOutput:
            chat = self.context.chat
            prompt = self.checked_prompt(chat.render_ids(list(kwargs["raw_prompt"]), None, add_generation_prompt=True))
            tool_ids = self.tokenizer.encode(TOOL_MESSAGE, add_special_tokens=False)
            response, mask = [], []
            for budget, latency in kwargs["plan"]:
                turn = await self.server.generate(prompt + response, budget)
                response += turn.token_ids
                mask += [1] * len(turn.token_ids)
                await asyncio.sleep(latency)  # the tool
                response += tool_ids
                mask += [0] * len(tool_ids)
            return AgentLoopOutput(prompt, response, mask, num_turns=len(kwargs["plan"]))


def _prompts(tokenizer, args) -> object:
    import numpy as np
    import torch

    from verl.protocol import DataProto

    rng = random.Random(0)
    raw, plans = np.empty(args.trajectories, dtype=object), np.empty(args.trajectories, dtype=object)
    raw[:] = [[{"role": "user", "content": f"Question {i}: what is {i} * 17?"}] for i in range(args.trajectories)]
    plans[:] = [
        [(rng.randint(args.min_turn, args.max_turn), rng.uniform(0, 2 * args.tool_latency)) for _ in range(args.turns)]
        for _ in range(args.trajectories)
    ]
    meta = {"eos_token_id": tokenizer.eos_token_id, "pad_token_id": tokenizer.pad_token_id, "do_sample": False}
    return DataProto.from_dict(
        tensors={"input_ids": torch.zeros(args.trajectories, 1, dtype=torch.long)},
        non_tensors={"raw_prompt": raw, "plan": plans, "agent_name": np.array(["simulated_tool_agent"] * len(raw))},
        meta_info=meta,
    )


def _config(mode: str, args, response_length: int):
    from omegaconf import OmegaConf

    return OmegaConf.create(
        {
            "name": "vllm",
            "mode": mode,
            "prompt_length": 128,
            "response_length": response_length,
            "dtype": "float32",
            "load_format": "dummy",
            "enforce_eager": True,
            "max_num_seqs": args.trajectories,
            "n": 1,
            "do_sample": False,
            "agent": {"default_agent_loop": "simulated_tool_agent"},
        }
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--shape", choices=sorted(SHAPES), default="smollm2-135m")
    parser.add_argument("--trajectories", type=int, default=32)
    parser.add_argument("--turns", type=int, default=3)
    parser.add_argument("--min-turn", type=int, default=16)
    parser.add_argument("--max-turn", type=int, default=96)
    parser.add_argument("--tool-latency", type=float, default=0.2)
    parser.add_argument("--repeats", type=int, default=2)
    args = parser.parse_args()

    import torch
    from transformers import AutoConfig, AutoTokenizer

    from verl.demo.tiny_model import make_tiny_model_dir
    from verl.multi_turn import AgentLoopRollout
    from verl.workers.rollout.vllm_rollout import vLLMRollout

    torch.set_num_threads(os.cpu_count() or 1)
    _register_simulated_loop()
    model_dir = make_tiny_model_dir(os.path.join(tempfile.mkdtemp(), "model"), **SHAPES[args.shape])
    tokenizer = AutoTokenizer.from_pretrained(model_dir)
    tool_len = len(tokenizer.encode(TOOL_MESSAGE, add_special_tokens=False))
    response_length = args.turns * (args.max_turn + tool_len)
    engine = vLLMRollout(
        model_dir, _config("sync", args, response_length), tokenizer, AutoConfig.from_pretrained(model_dir)
    )
    results = {}
    for _ in range(args.repeats):
        for mode in ("sync", "async"):
            rollout = AgentLoopRollout(engine, _config(mode, args, response_length), tokenizer)
            start = time.perf_counter()
            out = rollout.generate_sequences(_prompts(tokenizer, args))
            seconds = time.perf_counter() - start
            rows = out.non_tensor_batch["agent_loop_metrics"]
            generated = int(out.batch["loss_mask"].sum())
            entry = results.setdefault(mode, {"seconds": [], "generated_tokens": [], "engine_calls": []})
            entry["seconds"].append(seconds)
            entry["generated_tokens"].append(generated)
            entry["engine_calls"].append(round(sum(row["engine_calls"] for row in rows)))
    for mode, entry in results.items():
        median = statistics.median(entry["seconds"])
        tokens = statistics.median(entry["generated_tokens"])
        summary = {
            "mode": mode,
            "shape": args.shape,
            "trajectories": args.trajectories,
            "turns": args.turns,
            "median_seconds": round(median, 2),
            "seconds": [round(s, 2) for s in entry["seconds"]],
            "generated_tokens": tokens,
            "generated_tokens_per_s": round(tokens / median, 1),
            "engine_calls": entry["engine_calls"],
        }
        print(json.dumps(summary), flush=True)
    ratio = statistics.median(results["sync"]["seconds"]) / statistics.median(results["async"]["seconds"])
    print(json.dumps({"sync_over_async_wall_time": round(ratio, 2)}), flush=True)


if __name__ == "__main__":
    main()
