"""Whole-batch advantage estimators vs plain per-sample loops, timed in the same run.

Times GRPO, RLOO and REINFORCE++ from ``verl.trainer.ppo.core_algos`` on ``--bs`` responses of ``--resp-len``
tokens (default 65,536 x 1,024, float32, outcome reward on the last valid token, ``--group`` responses per
prompt) against per-sample Python loops written here from the spec formulas. Checks the results agree and
prints one JSON line per figure: ``{"figure": "<estimator>", "loop_s", "ours_s", "speedup", "max_abs_diff"}``.

    python scripts/benchmark/bench_advantages.py [--bs 65536] [--resp-len 1024] [--group 8]
"""

from __future__ import annotations

import argparse
import json
import time
from collections import defaultdict

import numpy as np
import torch

from verl.trainer.ppo import core_algos

EPS = 1e-6


# ---------------------------------------------------------------- per-sample reference loops
def grpo_loop(rewards, mask, index):
    scores = rewards.sum(dim=-1)
    id2score = defaultdict(list)
    for i in range(scores.shape[0]):
        id2score[index[i]].append(scores[i])
    id2mean, id2std = {}, {}
    for uid, vals in id2score.items():
        if len(vals) == 1:
            id2mean[uid], id2std[uid] = torch.tensor(0.0), torch.tensor(1.0)
        else:
            group = torch.stack(vals)
            id2mean[uid], id2std[uid] = group.mean(), group.std()
    for i in range(scores.shape[0]):
        scores[i] = (scores[i] - id2mean[index[i]]) / (id2std[index[i]] + EPS)
    return scores.unsqueeze(-1) * mask


def rloo_loop(rewards, mask, index):
    scores = rewards.sum(dim=-1)
    id2score = defaultdict(list)
    for i in range(scores.shape[0]):
        id2score[index[i]].append(scores[i])
    id2mean = {uid: torch.stack(vals).mean() for uid, vals in id2score.items()}
    for i in range(scores.shape[0]):
        n = len(id2score[index[i]])
        if n > 1:
            scores[i] = scores[i] * n / (n - 1) - id2mean[index[i]] * n / (n - 1)
    return scores.unsqueeze(-1) * mask


def reinforce_pp_loop(rewards, mask, gamma=1.0):
    returns = torch.empty_like(rewards)
    for i in range(rewards.shape[0]):
        r_row, m_row = rewards[i].tolist(), mask[i].tolist()
        out, running = [0.0] * len(r_row), 0.0
        for t in range(len(r_row) - 1, -1, -1):
            running = r_row[t] + gamma * running
            out[t] = running
            running *= m_row[t]
        returns[i] = torch.tensor(out)
    n = mask.sum()
    mean = (returns * mask).sum() / n
    var = ((returns - mean) ** 2 * mask).sum() / n * (n / (n - 1))
    return (returns - mean) * torch.rsqrt(var + 1e-8) * mask


# ---------------------------------------------------------------- harness
def make_batch(bs: int, resp_len: int, group: int, seed: int = 0):
    g = torch.Generator().manual_seed(seed)
    lengths = torch.randint(1, resp_len + 1, (bs,), generator=g)
    mask = (torch.arange(resp_len) < lengths.unsqueeze(-1)).float()
    rewards = torch.zeros(bs, resp_len)
    rewards[torch.arange(bs), lengths - 1] = torch.randint(0, 2, (bs,), generator=g).float()
    uids = [f"{k:08x}-prompt" for k in torch.randperm(bs // group + 1, generator=g).tolist()]
    index = np.array([uids[i // group] for i in range(bs)], dtype=object)
    return rewards, mask, index


def timed(fn, repeats: int = 1):
    """Result and median wall time of ``repeats`` calls (the machine is shared, so single runs are noisy)."""
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        out = fn()
        times.append(time.perf_counter() - start)
    return out, float(np.median(times))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--bs", type=int, default=65536)
    parser.add_argument("--resp-len", type=int, default=1024)
    parser.add_argument("--group", type=int, default=8, help="responses per prompt")
    parser.add_argument("--repeats", type=int, default=3, help="runs of the vectorised version (median)")
    args = parser.parse_args()

    # warm up both code paths (thread pools, first-call dispatch) on a small batch
    small = make_batch(64, 32, args.group, seed=1)
    grpo_loop(*small), core_algos.compute_grpo_outcome_advantage(*small)
    reinforce_pp_loop(*small[:2]), core_algos.compute_reinforce_plus_plus_outcome_advantage(*small[:2], config={})

    rewards, mask, index = make_batch(args.bs, args.resp_len, args.group)
    cases = {
        "grpo": (
            lambda: grpo_loop(rewards, mask, index),
            lambda: core_algos.compute_grpo_outcome_advantage(rewards, mask, index)[0],
        ),
        "rloo": (
            lambda: rloo_loop(rewards, mask, index),
            lambda: core_algos.compute_rloo_outcome_advantage(rewards, mask, index)[0],
        ),
        "reinforce_plus_plus": (
            lambda: reinforce_pp_loop(rewards, mask),
            lambda: core_algos.compute_reinforce_plus_plus_outcome_advantage(rewards, mask, config={"gamma": 1.0})[0],
        ),
    }
    for name, (loop_fn, ours_fn) in cases.items():
        ours, ours_s = timed(ours_fn, repeats=args.repeats)
        ref, loop_s = timed(loop_fn)
        diff = (ours - ref).abs().max().item()
        record = {
            "figure": f"{name}_speedup",
            "bs": args.bs,
            "resp_len": args.resp_len,
            "loop_s": round(loop_s, 4),
            "ours_s": round(ours_s, 4),
            "ours_repeats": args.repeats,
            "speedup": round(loop_s / ours_s, 2),
            "max_abs_diff": diff,
            "equal": bool(torch.allclose(ours, ref, rtol=1e-4, atol=1e-4)),
            "torch_threads": torch.get_num_threads(),
        }
        print(json.dumps(record), flush=True)
        del ours, ref


if __name__ == "__main__":
    main()
