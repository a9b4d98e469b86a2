"""DAPO's dynamic sampling: keep only the prompt groups whose responses disagree, until a training batch is full.

A group is the ``rollout.n`` responses to one prompt (one ``uid``). When every response of a group gets the same
value of the filter metric (all right or all wrong), a group-relative advantage is zero for all of them and the
group adds nothing to the gradient; DAPO drops such groups and generates more prompts instead.
"""

from __future__ import annotations

import numpy as np

from verl import DataProto

__all__ = ["COMPUTED_METRICS", "DynamicSampler", "filter_groups", "groups_with_spread", "trajectory_metric"]

# metrics computed from the batch's tensors; any other name must be a per-trajectory reward extra info (acc, score...)
COMPUTED_METRICS = ("seq_final_reward", "seq_reward")


def trajectory_metric(batch: DataProto, metric: str) -> np.ndarray:
    """The value of ``metric`` for each trajectory of a scored batch, ``(bs,)``.

    ``seq_reward`` sums ``token_level_scores``; ``seq_final_reward`` sums ``token_level_rewards`` (the scores, as no
    in-reward KL penalty has been applied before filtering); other names are read from ``non_tensor_batch``, where
    the reward manager's extra infos are.
    """
    if metric in COMPUTED_METRICS:
        key = "token_level_rewards" if metric == "seq_final_reward" else "token_level_scores"
        if key not in batch.batch.keys():
            key = "token_level_scores"
        return batch.batch[key].sum(dim=-1).detach().cpu().numpy()
    values = batch.non_tensor_batch.get(metric)
    if values is None or len(values) != len(batch):
        extra = [k for k, v in batch.non_tensor_batch.items() if len(v) == len(batch) and _is_numeric(v)]
        raise ValueError(
            f"algorithm.filter_groups.metric={metric!r} is not a per-trajectory value of the scored batch; expected "
            f"one of {list(COMPUTED_METRICS) + sorted(extra)} (the reward function's extra infos are the others)"
        )
    return np.asarray(values, dtype=np.float64)


def _is_numeric(values: np.ndarray) -> bool:
    try:
        np.asarray(values, dtype=np.float64)
    except (TypeError, ValueError):
        return False
    return True


def groups_with_spread(uids: np.ndarray, values: np.ndarray) -> list:
    """The uids, in first-seen order, whose values are not all equal (``std > 0``) or that have a single sample."""
    groups: dict = {}
    for uid, value in zip(uids, values):
        groups.setdefault(uid, []).append(value)
    return [uid for uid, vals in groups.items() if len(vals) == 1 or np.std(vals) > 0]


def filter_groups(batch: DataProto, metric: str) -> tuple[DataProto, list]:
    """The trajectories of ``batch`` whose group has a spread in ``metric``, and the kept uids."""
    uids = batch.non_tensor_batch["uid"]
    kept = groups_with_spread(uids, trajectory_metric(batch, metric))
    keep = set(kept)
    return batch.select_idxs(np.array([uid in keep for uid in uids], dtype=bool)), kept


class DynamicSampler:
    """Accumulates the kept groups of successive generation batches until ``train_batch_size`` prompts are kept.

    ``add`` one scored generation batch at a time; once ``full``, ``take`` returns the first
    ``train_batch_size * n`` trajectories (whole groups: the batch is interleaved, a group's rows are contiguous)
    and starts over. ``add`` raises when ``max_num_gen_batches`` (> 0) batches did not fill one training batch.
    """

    def __init__(
        self, train_batch_size: int, n: int, metric: str, max_num_gen_batches: int = 0, gen_batch_size: int = 0
    ):
        self.train_batch_size, self.n, self.metric = train_batch_size, n, metric
        self.max_num_gen_batches, self.gen_batch_size = max_num_gen_batches, gen_batch_size
        self.reset()

    def reset(self) -> None:
        """Forget the accumulated batch and the counters (after each update)."""
        self.batch: DataProto | None = None
        self.num_prompts = 0
        self.num_gen_batches = 0
        self.num_generated = 0

    @property
    def full(self) -> bool:
        return self.num_prompts >= self.train_batch_size

    def add(self, scored: DataProto) -> list:
        """Filter one scored generation batch and keep its groups with a spread; returns the kept uids."""
        self.num_gen_batches += 1
        self.num_generated += len(scored) // self.n
        kept_batch, kept = filter_groups(scored, self.metric)
        self.num_prompts += len(kept)
        if kept:
            self.batch = kept_batch if self.batch is None else DataProto.concat([self.batch, kept_batch])
        if not self.full and 0 < self.max_num_gen_batches <= self.num_gen_batches:
            raise ValueError(
                f"DAPO dynamic sampling kept {self.num_prompts} of the {self.train_batch_size} prompts a step needs "
                f"(data.train_batch_size) after {self.num_gen_batches} generation batches ({self.num_generated} "
                f"prompts, data.gen_batch_size={self.gen_batch_size or 'train_batch_size'}): the other groups had "
                f"the same {self.metric!r} for all {self.n} responses. Raise algorithm.filter_groups."
                f"max_num_gen_batches={self.max_num_gen_batches} (<= 0: no limit) or data.gen_batch_size, or set "
                "algorithm.filter_groups.enable=False"
            )
        return kept

    def take(self) -> DataProto:
        """The first ``train_batch_size * n`` kept trajectories; resets the sampler."""
        assert self.full, f"only {self.num_prompts} of {self.train_batch_size} prompts kept"
        batch = self.batch.slice(0, self.train_batch_size * self.n)
        self.reset()
        return batch
