"""Reduce lists of per-micro-batch metric values to one number per key."""

from __future__ import annotations

from typing import Any

import numpy as np


def reduce_metrics(metrics: dict[str, list[Any]]) -> dict[str, Any]:
    """Replace each list in ``metrics`` (in place) by its max if the key contains "max", its min if it
    contains "min", else its mean; an empty list becomes nan. A scalar (e.g. a learning rate a worker reports
    once) stays as it is. Returns the same dict."""
    for key, values in metrics.items():
        if np.isscalar(values):
            metrics[key] = values
        elif len(values) == 0:
            metrics[key] = np.nan
        elif "max" in key:
            metrics[key] = np.max(values)
        elif "min" in key:
            metrics[key] = np.min(values)
        else:
            metrics[key] = np.mean(values)
    return metrics
