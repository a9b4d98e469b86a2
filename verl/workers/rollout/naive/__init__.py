"""A dependency-free sampling loop over a plain forward pass."""

from verl.workers.rollout.naive.naive_rollout import NaiveRollout

__all__ = ["NaiveRollout"]
