"""Reward managers: placement at the last valid token, extra info, batch/dapo/prime variants, registry."""

import time

import pytest
import torch
from omegaconf import OmegaConf

from verl.workers.reward_manager import (
    REWARD_MANAGER_REGISTRY,
    BatchRewardManager,
    DAPORewardManager,
    NaiveRewardManager,
    PrimeRewardManager,
    get_reward_manager_cls,
    register,
)


def test_naive_default_gsm8k_positions(tokenizer, make_batch, capsys):
    data = make_batch(["q1", "q2", "q3"], ["#### 7", "#### 8", "hmm"], ["7", "7", "7"])
    manager = NaiveRewardManager(tokenizer, num_examine=1)
    rewards = manager(data)
    assert rewards.shape == (3, 12) and rewards.dtype == torch.float32
    expected = torch.zeros(3, 12)
    expected[0, 5] = 1.0  # "#### 7" is 6 tokens: last valid index 5
    assert torch.equal(rewards, expected)
    out = capsys.readouterr().out
    assert out.count("[prompt]") == 1 and "[response] #### 7" in out and "[score] 1.0" in out


def test_naive_dict_scores_become_extra_info(tokenizer, make_batch):
    def score(data_source, solution_str, ground_truth, extra_info=None):
        ok = solution_str.strip() == ground_truth
        return {"score": 2.0 if ok else -1.0, "acc": ok, "length": len(solution_str)}

    data = make_batch(["a", "b"], ["yes", "no!!"], ["yes", "yes"])
    result = NaiveRewardManager(tokenizer, num_examine=0, compute_score=score)(data, return_dict=True)
    assert result["reward_tensor"][0, 2] == 2.0 and result["reward_tensor"][1, 3] == -1.0
    assert result["reward_tensor"].sum() == 1.0
    assert result["reward_extra_info"] == {"score": [2.0, -1.0], "acc": [True, False], "length": [3, 4]}


def test_multi_turn_tool_rewards_reach_the_scorer(tokenizer, make_batch):
    import numpy as np

    def score(data_source, solution_str, ground_truth, extra_info=None):
        return (
            extra_info["index"]
            + extra_info["reward_scores"]["calc"]
            + sum(extra_info["reward_scores"]["user_turn_rewards"])
        )

    def batch_score(data_sources, solution_strs, ground_truths, extra_infos):
        return [score(None, None, None, e) for e in extra_infos]

    data = make_batch(["a", "b"], ["x", "y"], ["1", "1"])
    scores = np.empty(2, dtype=object)
    scores[:] = [{"calc": 1.0, "user_turn_rewards": [0.5]}, {"calc": 0.0, "user_turn_rewards": []}]
    data.non_tensor_batch["reward_scores"] = scores
    for manager in (
        NaiveRewardManager(tokenizer, 0, compute_score=score),
        BatchRewardManager(tokenizer, 0, batch_score),
    ):
        rewards = manager(data)
        assert rewards[0, 0] == 1.5 and rewards[1, 0] == 1.0  # index + tool reward + turn scores
    assert data.non_tensor_batch["extra_info"][0] == {"index": 0}  # the row's own extra_info is not changed


def test_rm_scores_bypass_rule(tokenizer, make_batch):
    data = make_batch(["a"], ["b"], ["c"])
    data.batch["rm_scores"] = torch.full((1, 12), 0.5)
    for manager in (NaiveRewardManager(tokenizer, 0), PrimeRewardManager(tokenizer, 0)):
        assert torch.equal(manager(data), data.batch["rm_scores"])
        assert torch.equal(manager(data, return_dict=True)["reward_tensor"], data.batch["rm_scores"])


def test_batch_manager(tokenizer, make_batch):
    def batch_score(data_sources, solution_strs, ground_truths, extra_infos, bonus=0.0):
        # one call sees the whole batch: encode its size in the scores
        return [float(s == g) + bonus + 10 * len(solution_strs) for s, g in zip(solution_strs, ground_truths)]

    data = make_batch(["a", "b", "c"], ["1", "22", "3"], ["1", "2", "3"])
    manager = BatchRewardManager(tokenizer, 0, batch_score, bonus=0.5)
    rewards = manager(data)
    assert rewards[0, 0] == 31.5 and rewards[1, 1] == 30.5 and rewards[2, 0] == 31.5
    assert rewards.sum() == 93.5
    assert torch.equal(data.batch["acc"], torch.tensor([31.5, 30.5, 31.5]))


def test_batch_manager_failure_scores_zero(tokenizer, make_batch, caplog):
    data = make_batch(["a", "b"], ["1", "2"], ["1", "2"])
    short = BatchRewardManager(tokenizer, 0, lambda **kw: [1.0], timeout_s=5)
    assert short(data).sum() == 0.0
    assert any("expected 2 scores, got 1" in r.getMessage() for r in caplog.records)


def test_dapo_overlong_penalty_and_eos_strip(tokenizer, make_batch):
    seen = []

    def score(data_source, solution_str, ground_truth, extra_info=None):
        seen.append(solution_str)
        return {"score": 1.0, "acc": True}

    # response lengths 4 and 10 tokens (+1 eos each -> 5 and 11); max_resp_len 12, buffer 4 -> expected 8
    data = make_batch(["p", "p"], ["abcd", "abcdefghij"], ["x", "x"], eos=True)
    cfg = OmegaConf.create({"enable": True, "len": 4, "penalty_factor": 1.0, "log": True})
    manager = DAPORewardManager(tokenizer, 0, score, max_resp_len=12, overlong_buffer_cfg=cfg)
    result = manager(data, return_dict=True)
    # skip_special_tokens already drops the eos token id; responses reach the scorer without it
    assert seen == ["abcd", "abcdefghij"]
    assert result["reward_tensor"][0, 4] == 1.0  # 5 <= 8: no penalty
    assert result["reward_tensor"][1, 10] == pytest.approx(1.0 - 3 / 4)  # exceed 11 - 8 = 3
    assert result["reward_extra_info"]["overlong"] == [False, True]
    assert result["reward_extra_info"]["overlong_reward"] == [0, pytest.approx(-0.75)]
    with pytest.raises(AssertionError, match="max_resp_len"):
        DAPORewardManager(tokenizer, 0, score, overlong_buffer_cfg=cfg)


def test_dapo_strips_eos_string(tokenizer, make_batch):
    seen = []
    manager = DAPORewardManager(tokenizer, 0, lambda **kw: seen.append(kw["solution_str"]) or 0.0)
    manager(make_batch(["p"], ["ok<|endoftext|>"], ["x"]))  # bytes of the eos *string*, not the special id
    assert seen == ["ok"]


def _prime_score(data_source, completion, ground_truth, extra_info):
    if completion == "boom":
        raise ValueError("bad sample")
    if completion == "hang":
        time.sleep(60)
    return (completion == ground_truth, "meta")


def test_prime_parallel_with_failures(tokenizer, make_batch):
    data = make_batch(["a", "b", "c", "d"], ["42", "boom", "hang", "41"], ["42", "1", "1", "42"])
    manager = PrimeRewardManager(tokenizer, 0, compute_score=_prime_score, timeout_s=2.0, num_processes=4)
    start = time.monotonic()
    rewards = manager(data)
    assert time.monotonic() - start < 15
    assert rewards[0, 1] == 1.0 and rewards.sum() == 1.0
    assert torch.equal(data.batch["acc"], torch.tensor([1.0, 0.0, 0.0, 0.0]))


def test_registry():
    assert set(REWARD_MANAGER_REGISTRY) >= {"naive", "batch", "dapo", "prime"}
    assert get_reward_manager_cls("naive") is NaiveRewardManager
    with pytest.raises(ValueError, match="Unknown reward manager: Naive"):
        get_reward_manager_cls("Naive")

    class Mine:
        pass

    assert register("test_mine")(Mine) is Mine
    assert register("test_mine")(Mine) is Mine  # same class again is fine
    with pytest.raises(ValueError, match="test_mine"):
        register("test_mine")(type("Other", (), {}))
    del REWARD_MANAGER_REGISTRY["test_mine"]
