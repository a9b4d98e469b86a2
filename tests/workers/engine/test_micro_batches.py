"""Micro-batch splitting of a DataProto (static and token-budget) and the order restored after."""

import pytest
import torch

import verl.workers.engine.micro_batches as mb
from tests.workers.engine.fsdp.test_hf_forward import _padded
from verl.protocol import DataProto


def test_static_and_dynamic_micro_batches_restore_order():
    ids, mask, pos = _padded()
    data = DataProto.from_dict({"input_ids": ids, "attention_mask": mask, "position_ids": pos})
    static, parts = mb.make_micro_batches(data, ["input_ids", "attention_mask"], 3, use_dynamic_bsz=False)
    assert parts is None and [len(m["input_ids"]) for m in static] == [3, 1]
    dynamic, parts = mb.make_micro_batches(data, ["input_ids", "attention_mask"], None, True, max_token_len=7)
    assert all(int(m["attention_mask"].sum()) <= 7 for m in dynamic)
    joined = torch.cat([m["input_ids"] for m in dynamic])
    assert torch.equal(mb.restore_order(joined, parts), ids)
    with pytest.raises(ValueError, match="micro_batch_size=0"):
        mb.make_micro_batches(data, ["input_ids"], 0, use_dynamic_bsz=False)
