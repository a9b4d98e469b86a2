"""verl.utils.tensordict_utils: per-sample values follow their rows, batch-level values are shared and checked."""

import numpy as np
import pytest
import torch

from verl.utils.tensordict_utils import (
    assign_non_tensor,
    batch_level_values,
    chunk_tensordict,
    concat_tensordict,
    get_tensordict,
    index_select_tensor_dict,
)


def _batch():
    prompts = np.array(["p0", "p1", "p2", "p3"], dtype=object)
    return get_tensordict(
        {"input_ids": torch.arange(8).view(4, 2), "score": torch.tensor([0.0, 1.0, 2.0, 3.0])},
        {"prompt": prompts, "tools": [{"k": i} for i in range(4)], "temperature": 0.7},
    )


def test_get_tensordict_sorts_per_sample_from_batch_level_values():
    td = _batch()
    assert td.batch_size == torch.Size([4])
    assert list(td["prompt"]) == ["p0", "p1", "p2", "p3"] and td[2]["tools"] == {"k": 2}
    assert batch_level_values(td) == {"temperature": 0.7}
    with pytest.raises(ValueError, match="first \\(batch\\) dim"):
        get_tensordict({"a": torch.zeros(2), "b": torch.zeros(3)})
    with pytest.raises(ValueError, match="'prompt' has 3 entries for 2 rows"):
        get_tensordict({"a": torch.zeros(2)}, {"prompt": ["x", "y", "z"]})


def test_index_select_keeps_rows_together():
    out = index_select_tensor_dict(_batch(), np.array([3, 1]))
    assert out["input_ids"].tolist() == [[6, 7], [2, 3]]
    assert list(out["prompt"]) == ["p3", "p1"] and out[0]["tools"] == {"k": 3}
    assert batch_level_values(out) == {"temperature": 0.7}


def test_chunk_then_concat_round_trips_and_reorders():
    first, second = chunk_tensordict(_batch(), 2)
    assert first["score"].tolist() == [0.0, 1.0] and list(second["prompt"]) == ["p2", "p3"]
    out = concat_tensordict([second, first])
    assert out["score"].tolist() == [2.0, 3.0, 0.0, 1.0]
    assert list(out["prompt"]) == ["p2", "p3", "p0", "p1"]
    assert batch_level_values(out) == {"temperature": 0.7}
    with pytest.raises(ValueError, match="does not split into 3 equal chunks"):
        chunk_tensordict(_batch(), 3)


def test_concat_refuses_disagreeing_batch_level_values():
    first, second = chunk_tensordict(_batch(), 2)
    assign_non_tensor(second, temperature=1.0, step=3)
    assert batch_level_values(second) == {"temperature": 1.0, "step": 3}
    with pytest.raises(ValueError, match="batch-level value '(temperature|step)' differs"):
        concat_tensordict([first, second])
