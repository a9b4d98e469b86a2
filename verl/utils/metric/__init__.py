"""Metric helpers shared by workers and the trainer."""

from verl.utils.metric.utils import reduce_metrics

__all__ = ["reduce_metrics"]
