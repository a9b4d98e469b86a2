"""Trainer metrics: data/timing/throughput metrics, bootstrap, majority vote, validation metrics."""

from unittest.mock import MagicMock, patch

import numpy as np
import pytest
import torch

from verl import DataProto
from verl.trainer.ppo import metric_utils
from verl.trainer.ppo.metric_utils import (
    bootstrap_metric,
    calc_maj_val,
    compute_data_metrics,
    compute_throughout_metrics,
    compute_timing_metrics,
    process_validation_metrics,
)


def _batch():
    # prompt width 2, response width 2; row 0: prompt 2, response 2 (clipped); row 1: prompt 1, response 1
    attention_mask = torch.tensor([[1, 1, 1, 1], [0, 1, 1, 0]])
    return DataProto.from_dict(
        tensors={
            "token_level_scores": torch.tensor([[1.0, 2.0], [3.0, 4.0]]),
            "token_level_rewards": torch.tensor([[0.5, 1.0], [1.5, 2.0]]),
            "advantages": torch.tensor([[0.1, 0.2], [0.3, 99.0]]),
            "returns": torch.tensor([[1.0, 2.0], [3.0, -99.0]]),
            "values": torch.tensor([[1.0, 1.0], [2.0, 50.0]]),
            "responses": torch.zeros(2, 2, dtype=torch.long),
            "attention_mask": attention_mask,
        },
        meta_info={"global_token_num": [4, 2]},
    )


def test_compute_data_metrics_by_hand():
    m = compute_data_metrics(_batch(), use_critic=True)
    assert m["critic/score/mean"] == pytest.approx(5.0)
    assert (m["critic/score/max"], m["critic/score/min"]) == (7.0, 3.0)
    assert m["critic/rewards/mean"] == pytest.approx(2.5)
    # the padded response position (99 / -99 / 50) is excluded
    assert m["critic/advantages/max"] == pytest.approx(0.3) and m["critic/advantages/mean"] == pytest.approx(0.2)
    assert m["critic/returns/min"] == pytest.approx(1.0) and m["critic/returns/mean"] == pytest.approx(2.0)
    assert m["critic/values/max"] == pytest.approx(2.0)
    # R - V = [0, 1, 1] -> var 1/3 ; var(R) = 1 -> 1 - (1/3)/(1 + 1e-5)
    assert m["critic/vf_explained_var"] == pytest.approx(1 - (1 / 3) / (1 + 1e-5), rel=1e-5)
    assert m["response_length/mean"] == 1.5 and m["response_length/clip_ratio"] == 0.5
    assert (m["prompt_length/max"], m["prompt_length/min"], m["prompt_length/clip_ratio"]) == (2.0, 1.0, 0.5)
    no_critic = compute_data_metrics(_batch(), use_critic=False)
    assert "critic/values/mean" not in no_critic and "critic/vf_explained_var" not in no_critic


def test_compute_data_metrics_with_plain_dict_batch():
    mock = MagicMock()
    mock.batch = dict(_batch().batch.items())
    assert compute_data_metrics(mock, use_critic=False)["critic/score/mean"] == pytest.approx(5.0)


def test_timing_metrics_use_patched_response_info():
    fake = {"prompt_length": torch.tensor([10.0, 20.0]), "response_length": torch.tensor([5.0, 15.0])}
    timing = {"gen": 0.2, "update_actor": 0.5, "reward": 1.0}
    with patch("verl.trainer.ppo.metric_utils._compute_response_info", return_value=fake):
        m = compute_timing_metrics(MagicMock(), timing)
    assert m["timing_s/gen"] == 0.2 and m["timing_s/reward"] == 1.0
    assert m["timing_per_token_ms/gen"] == pytest.approx(200 / 20)
    assert m["timing_per_token_ms/update_actor"] == pytest.approx(500 / 50)
    assert "timing_per_token_ms/reward" not in m


def test_response_info_and_throughput():
    info = metric_utils._compute_response_info(_batch())
    assert info["prompt_length"].tolist() == [2.0, 1.0] and info["response_length"].tolist() == [2.0, 1.0]
    assert info["response_mask"].tolist() == [[1, 1], [1, 0]]
    m = compute_throughout_metrics(_batch(), {"step": 2.0}, n_gpus=3)
    assert m == {"perf/total_num_tokens": 6, "perf/time_per_step": 2.0, "perf/throughput": 1.0}


def test_deprecated_reduce_metrics_wrapper():
    with pytest.warns(DeprecationWarning):
        out = metric_utils.reduce_metrics({"a/max": [1, 3], "b": [1.0, 2.0]})
    assert out == {"a/max": 3, "b": 1.5}


def test_bootstrap_metric_matches_explicit_resampling():
    data = [0.0, 1.0, 5.0, 2.0]
    out = bootstrap_metric(data, 2, [np.max, np.min], n_bootstrap=50, seed=7)
    np.random.seed(7)
    maxes, mins = [], []
    for _ in range(50):
        idx = np.random.choice(len(data), size=2, replace=True)
        maxes.append(max(data[i] for i in idx))
        mins.append(min(data[i] for i in idx))
    assert out == [(pytest.approx(np.mean(maxes)), pytest.approx(np.std(maxes))), (np.mean(mins), np.std(mins))]
    # a constant sample has zero spread
    assert bootstrap_metric([3.0, 3.0], 2, [np.max]) == [(3.0, 0.0)]
    with pytest.raises(ValueError, match="empty"):
        bootstrap_metric([], 2, [np.max])


def test_calc_maj_val():
    data = [{"p": "a", "v": 1}, {"p": "b", "v": 2}, {"p": "b", "v": 3}, {"p": "a", "v": 4}, {"p": "c", "v": 5}]
    assert calc_maj_val(data, vote_key="p", val_key="v") == 1  # tie a/b: first seen wins, first value
    assert calc_maj_val(data + [{"p": "b", "v": 6}], vote_key="p", val_key="v") == 2


def test_process_validation_metrics():
    result = process_validation_metrics(
        ["source1", "source1", "source2"], ["p1", "p1", "p2"], {"score": [0.8, 0.9, 0.7]}
    )
    assert result["source1"]["score"]["mean@2"] == pytest.approx(0.85)
    assert result["source1"]["score"]["std@2"] == pytest.approx(0.05)
    assert 0.85 <= result["source1"]["score"]["best@2/mean"] <= 0.9
    assert 0.8 <= result["source1"]["score"]["worst@2/mean"] <= 0.85
    assert result["source2"]["score"] == {"mean@1": pytest.approx(0.7)}


def test_process_validation_metrics_sizes_maj_and_averaging():
    n = 5
    sources = ["s"] * (2 * n)
    prompts = ["p1"] * n + ["p2"] * n
    acc = [1.0, 0.0, 0.0, 1.0, 1.0] + [0.0] * n
    preds = ["x", "y", "y", "x", "x"] + ["z"] * n
    result = process_validation_metrics(sources, prompts, {"acc": acc, "pred": preds}, seed=0)["s"]
    assert "pred" not in result  # string variables are skipped
    names = set(result["acc"])
    assert {"mean@5", "std@5", "best@2/mean", "best@4/std", "worst@5/mean", "maj@2/mean", "maj@5/std"} <= names
    assert "best@8/mean" not in names
    assert result["acc"]["mean@5"] == pytest.approx((0.6 + 0.0) / 2)  # averaged over the two prompts
    # p2 answers are all wrong, so every bootstrap of p2 is 0; p1's majority answer "x" is correct
    assert result["acc"]["maj@5/mean"] <= 0.5 and result["acc"]["maj@5/mean"] > 0.25
    with pytest.raises(ValueError, match=r"\['acc'\] has 1 values"):
        process_validation_metrics(["s", "s"], ["p", "p"], {"acc": [1.0]})
