"""Hybrid rewards (named sources combined by weight or by a function, each score kept for its metric) and the
``remote`` manager (scoring in Ray CPU workers, refused where Ray is not running)."""

import math
import time

import pytest
import torch

from verl.trainer.ppo.reward import reward_source_metrics
from verl.workers.reward_manager import HybridRewardManager, NaiveRewardManager, RemoteRewardManager, RewardSource


def length_score(data_source, solution_str, ground_truth, extra_info=None):
    return float(len(solution_str))


def exact(data_source, solution_str, ground_truth, extra_info=None):
    return 1.0 if solution_str == ground_truth else 0.0


async def async_exact(data_source, solution_str, ground_truth, extra_info=None):
    return {"score": exact(data_source, solution_str, ground_truth), "judged": True}


def slow_exact(data_source, solution_str, ground_truth, extra_info=None):
    time.sleep(0.1)
    return exact(data_source, solution_str, ground_truth)


def last_token_rewards(reward_tensor, batch):
    lengths = batch.batch["attention_mask"][:, batch.batch["prompts"].shape[-1] :].sum(-1)
    return [float(reward_tensor[i, int(lengths[i]) - 1]) for i in range(len(batch))]


def test_weighted_sources_and_their_metrics(tokenizer, make_batch):
    batch = make_batch(["a", "b", "c"], ["12", "7", "333"], ["12", "8", "333"])
    hybrid = HybridRewardManager(
        tokenizer,
        0,
        [
            RewardSource("rule", 1.0, NaiveRewardManager(tokenizer, 0, exact)),
            RewardSource("judge", 0.5, NaiveRewardManager(tokenizer, 0, async_exact)),
            RewardSource("length", -0.1, NaiveRewardManager(tokenizer, 0, length_score)),
        ],
    )
    out = hybrid(batch, return_dict=True)
    # rule + 0.5 * judge - 0.1 * length, by hand
    expected = [1 + 0.5 - 0.2, 0 + 0 - 0.1, 1 + 0.5 - 0.3]
    assert last_token_rewards(out["reward_tensor"], batch) == pytest.approx(expected)
    assert float(out["reward_tensor"].sum()) == pytest.approx(sum(expected))  # nothing off the last token
    info = out["reward_extra_info"]
    assert info["reward_source/rule"] == [1.0, 0.0, 1.0] and info["reward_source/length"] == [2.0, 1.0, 3.0]
    assert "reward_call_failed" not in info
    metrics = reward_source_metrics({k: v for k, v in info.items()})
    assert metrics["reward/rule/mean"] == pytest.approx(2 / 3) and metrics["reward/length/max"] == 3.0
    assert set(metrics) == {f"reward/{n}/{s}" for n in ("rule", "judge", "length") for s in ("mean", "max", "min")}


def test_combine_function_and_reward_model_source(tokenizer, make_batch):
    batch = make_batch(["a", "b"], ["12", "7"], ["12", "7"])
    rm_scores = torch.zeros(2, 12)
    rm_scores[0, 1], rm_scores[1, 0] = 0.25, -2.0
    batch.batch["rm_scores"] = rm_scores

    def gate(scores, data_source, ground_truth, extra_info):
        # the reward model counts only when the rule passes
        return scores["rule"] * (1.0 + scores["rm"])

    hybrid = HybridRewardManager(
        tokenizer,
        0,
        [RewardSource("rule", 1.0, NaiveRewardManager(tokenizer, 0, exact)), RewardSource("rm", 1.0, None)],
        combine=gate,
    )
    out = hybrid(batch, return_dict=True)
    # the function source scored the responses itself although rm_scores was on the batch
    assert out["reward_extra_info"]["reward_source/rule"] == [1.0, 1.0]
    assert out["reward_extra_info"]["reward_source/rm"] == [0.25, -2.0]
    assert last_token_rewards(out["reward_tensor"], batch) == pytest.approx([1.25, -1.0])


def test_a_failing_source_or_combine_scores_zero_and_is_counted(tokenizer, make_batch):
    batch = make_batch(["a", "b"], ["12", "7"], ["12", "7"])

    async def broken(data_source, solution_str, ground_truth, extra_info=None):
        if solution_str == "7":
            raise ConnectionError("judge unreachable")
        return 1.0

    hybrid = HybridRewardManager(
        tokenizer,
        0,
        [
            RewardSource("rule", 1.0, NaiveRewardManager(tokenizer, 0, exact)),
            RewardSource("judge", 1.0, NaiveRewardManager(tokenizer, 0, broken)),
        ],
    )
    out = hybrid(batch, return_dict=True)
    assert last_token_rewards(out["reward_tensor"], batch) == [2.0, 1.0]
    assert out["reward_extra_info"]["reward_call_failed"] == [False, True]

    def bad_combine(scores, **sample):
        raise ValueError("nope")

    hybrid.combine = bad_combine
    out = hybrid(batch, return_dict=True)
    assert last_token_rewards(out["reward_tensor"], batch) == [0.0, 0.0]
    assert out["reward_extra_info"]["reward_call_failed"] == [True, True]


def test_remote_refuses_without_ray(tokenizer, make_batch, monkeypatch):
    import ray

    monkeypatch.setattr(ray, "is_initialized", lambda: False)  # as under the in-process worker group
    manager = RemoteRewardManager(tokenizer, 0, exact, num_workers=2)
    with pytest.raises(RuntimeError, match="reward_manager=remote .* Ray is not running"):
        manager(make_batch(["a"], ["1"], ["1"]))


def test_remote_scores_in_ray_workers_like_naive_and_in_parallel(tokenizer, make_batch, ray_cluster):
    n = 16
    responses = [str(i % 5) for i in range(n)]
    truths = [str(i % 3) for i in range(n)]
    batch = make_batch(["q"] * n, responses, truths)
    naive = NaiveRewardManager(tokenizer, 0, exact)(batch, return_dict=True)
    manager = RemoteRewardManager(tokenizer, 0, slow_exact, num_workers=2)
    try:
        manager(batch[:2])  # starts the workers
        started = time.monotonic()
        out = manager(batch, return_dict=True)
        elapsed = time.monotonic() - started
        assert len(manager._workers) == 2
        assert torch.equal(out["reward_tensor"], naive["reward_tensor"])
        # 16 samples x 100 ms: 1.6 s one after another; two workers take about half (plus Ray's overhead)
        assert elapsed < 1.3, elapsed
        assert not math.isnan(float(out["reward_tensor"].sum()))
    finally:
        manager.shutdown()
