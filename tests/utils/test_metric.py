"""verl.utils.metric.reduce_metrics: max/min/mean by key name, in place."""

import math

import numpy as np

from verl.utils.metric import reduce_metrics


def test_reduce_metrics_by_key_name():
    metrics = {
        "loss": [1.0, 2.0, 6.0],
        "perf/max_memory_allocated_gb": [3.0, 9.0, 1.0],
        "global_seqlen/min": [3, 9, 1],
        "global_seqlen/minmax_diff": [4, 2],  # "max" is checked first
        "empty": [],
    }
    out = reduce_metrics(metrics)
    assert out is metrics
    assert out["loss"] == 3.0
    assert out["perf/max_memory_allocated_gb"] == 9.0
    assert out["global_seqlen/min"] == 1
    assert out["global_seqlen/minmax_diff"] == 4
    assert math.isnan(out["empty"])
    assert isinstance(out["loss"], float | np.floating)
