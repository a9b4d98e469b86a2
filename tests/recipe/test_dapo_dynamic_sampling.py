"""DAPO's dynamic sampling on constructed batches: which groups are kept, accumulation, truncation, the limit."""

import numpy as np
import pytest
import torch

from recipe.dapo.dynamic_sampling import DynamicSampler, filter_groups, groups_with_spread, trajectory_metric
from verl import DataProto


def scored_batch(groups: dict[str, list[float]], acc: dict[str, list[bool]] | None = None) -> DataProto:
    """Interleaved groups as the trainer builds them: row i of group g has score ``groups[g][i]`` at its last token
    (responses of width 3), and ``row_id`` = a running number to follow rows through filtering."""
    uids = [uid for uid, scores in groups.items() for _ in scores]
    scores = [s for group in groups.values() for s in group]
    token_level_scores = torch.zeros(len(scores), 3)
    token_level_scores[:, -1] = torch.tensor(scores)
    non_tensors = {"uid": np.array(uids, dtype=object)}
    if acc is not None:
        non_tensors["acc"] = np.array([a for group in acc.values() for a in group])
    return DataProto.from_dict(
        tensors={"token_level_scores": token_level_scores, "row_id": torch.arange(len(scores))},
        non_tensors=non_tensors,
    )


def test_groups_without_spread_are_dropped_single_samples_kept():
    uids = np.array(["a", "a", "b", "b", "c", "d", "d"], dtype=object)
    values = np.array([1.0, 0.0, 1.0, 1.0, 0.0, 0.5, 0.5])
    assert groups_with_spread(uids, values) == ["a", "c"]


def test_filter_groups_on_a_batch_with_zero_spread_groups():
    batch = scored_batch(
        {"p0": [1.0, 0.0, 1.0], "p1": [1.0, 1.0, 1.0], "p2": [0.0, 0.0, 0.0], "p3": [0.0, 0.2, 0.0]},
        acc={"p0": [True, False, True], "p1": [True, True, True], "p2": [False] * 3, "p3": [False] * 3},
    )
    kept_batch, kept = filter_groups(batch, "seq_reward")
    assert kept == ["p0", "p3"]
    assert kept_batch.batch["row_id"].tolist() == [0, 1, 2, 9, 10, 11]
    assert list(kept_batch.non_tensor_batch["uid"]) == ["p0"] * 3 + ["p3"] * 3
    # on acc (a reward extra info), p3 has no spread: all its responses are wrong
    _, kept = filter_groups(batch, "acc")
    assert kept == ["p0"]
    # seq_final_reward reads token_level_rewards once they exist
    batch.batch["token_level_rewards"] = batch.batch["token_level_scores"].clone()
    batch.batch["token_level_rewards"][3, -1] = 0.0
    _, kept = filter_groups(batch, "seq_final_reward")
    assert kept == ["p0", "p1", "p3"]


def test_an_unknown_metric_names_the_available_ones():
    batch = scored_batch({"p0": [1.0, 0.0]}, acc={"p0": [True, False]})
    with pytest.raises(ValueError, match=r"filter_groups\.metric='accuracy'.*'seq_final_reward', 'seq_reward', 'acc'"):
        trajectory_metric(batch, "accuracy")


def test_sampler_accumulates_two_generation_batches_then_truncates():
    sampler = DynamicSampler(train_batch_size=3, n=2, metric="seq_reward", max_num_gen_batches=0)
    first = scored_batch({"a0": [1, 0], "a1": [1, 1], "a2": [0, 0], "a3": [0, 1]})
    assert sampler.add(first) == ["a0", "a3"]
    assert not sampler.full and sampler.num_prompts == 2 and sampler.num_gen_batches == 1
    second = scored_batch({"b0": [0, 0], "b1": [1, 0], "b2": [0.5, 0], "b3": [1, 1]})
    second.batch["row_id"] += 100
    assert sampler.add(second) == ["b1", "b2"]
    assert sampler.full and sampler.num_prompts == 4 and sampler.num_gen_batches == 2
    batch = sampler.take()
    # the first train_batch_size * n = 6 kept trajectories: whole groups a0, a3, b1 (b2 is dropped)
    assert list(batch.non_tensor_batch["uid"]) == ["a0", "a0", "a3", "a3", "b1", "b1"]
    assert batch.batch["row_id"].tolist() == [0, 1, 6, 7, 102, 103]
    assert sampler.num_prompts == 0 and sampler.num_gen_batches == 0 and sampler.batch is None


def test_sampler_raises_at_the_generation_batch_limit():
    sampler = DynamicSampler(train_batch_size=2, n=2, metric="seq_reward", max_num_gen_batches=2, gen_batch_size=2)
    sampler.add(scored_batch({"a0": [1, 1], "a1": [0, 1]}))
    with pytest.raises(ValueError) as info:
        sampler.add(scored_batch({"b0": [0, 0], "b1": [1, 1]}))
    message = str(info.value)
    assert "kept 1 of the 2 prompts" in message and "after 2 generation batches (4 prompts" in message
    for key in ("max_num_gen_batches=2", "data.gen_batch_size", "algorithm.filter_groups.enable=False"):
        assert key in message
    # no limit: keeps generating
    unlimited = DynamicSampler(train_batch_size=2, n=2, metric="seq_reward", max_num_gen_batches=0)
    for _ in range(5):
        unlimited.add(scored_batch({"c": [1, 1]}))
    assert unlimited.num_gen_batches == 5 and not unlimited.full
