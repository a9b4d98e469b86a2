"""Tests for verl.trainer.report.generation_dump: the `{step}.jsonl` generation dumps."""

import json
from types import SimpleNamespace

import numpy as np
import pytest
import torch

from verl.trainer.report.generation_dump import (
    dump_generations,
    load_generations,
    rollout_generations,
    select_val_generations,
)


def test_dump_writes_one_line_per_sample_with_matching_extra_infos(tmp_path):
    path = dump_generations(
        inputs=["1+1=", "名前は?"],
        outputs=["2", "café"],
        scores=np.array([1.0, 0.0], dtype=np.float32),
        reward_extra_infos_dict={"acc": [True, False], "pred": np.array(["2", "x"]), "batch_note": ["only one"]},
        dump_path=str(tmp_path / "rollouts"),
        step=7,
    )
    assert path == str(tmp_path / "rollouts" / "7.jsonl")
    raw = open(path, encoding="utf-8").read()
    assert raw.endswith("\n") and raw.count("\n") == 2
    assert "名前は?" in raw and "café" in raw  # ensure_ascii=False: text stays readable
    rows = load_generations(path)
    assert rows == [
        {"input": "1+1=", "output": "2", "score": 1.0, "step": 7, "acc": True, "pred": "2"},
        {"input": "名前は?", "output": "café", "score": 0.0, "step": 7, "acc": False, "pred": "x"},
    ]
    assert list(rows[0]) == ["input", "output", "score", "step", "acc", "pred"]  # batch_note: wrong length, left out


def test_dump_rewrites_a_step_and_keeps_others(tmp_path):
    dump_generations(["a"], ["b"], [0.5], None, str(tmp_path), step=1)
    dump_generations(["c"], ["d"], [0.25], {}, str(tmp_path), step=2)
    dump_generations(["e"], ["f"], [1.0], {}, str(tmp_path), step=1)  # resumed run repeats step 1
    assert sorted(p.name for p in tmp_path.iterdir()) == ["1.jsonl", "2.jsonl"]
    assert load_generations(str(tmp_path / "1.jsonl")) == [{"input": "e", "output": "f", "score": 1.0, "step": 1}]


def test_dump_converts_tensors_and_nested_numpy(tmp_path):
    path = dump_generations(
        ["q"], ["a"], torch.tensor([2.5]), {"vec": [np.arange(3)], "meta": [{"k": np.float64(0.5)}]}, str(tmp_path), 0
    )
    assert json.loads(open(path).readline()) == {
        "input": "q",
        "output": "a",
        "score": 2.5,
        "step": 0,
        "vec": [0, 1, 2],
        "meta": {"k": 0.5},
    }


def test_dump_rejects_mismatched_lengths_and_column_clashes(tmp_path):
    with pytest.raises(ValueError, match="got 2, 1 and 2"):
        dump_generations(["a", "b"], ["x"], [1.0, 0.0], None, str(tmp_path), 1)
    with pytest.raises(ValueError, match="'score'"):
        dump_generations(["a"], ["x"], [1.0], {"score": [3.0]}, str(tmp_path), 1)


def test_rollout_generations_decodes_and_sums_scores():
    vocab = {0: "<pad>", 1: "hi", 2: "there", 3: "!"}

    class Tok:
        def batch_decode(self, ids, skip_special_tokens):
            assert skip_special_tokens
            return [" ".join(vocab[i] for i in row.tolist() if i != 0) for row in ids]

    batch = SimpleNamespace(
        batch={
            "prompts": torch.tensor([[0, 1], [1, 2]]),
            "responses": torch.tensor([[3, 0, 0], [2, 3, 0]]),
            "token_level_scores": torch.tensor([[0.0, 0.0, 1.0], [0.0, 0.5, 0.0]]),
        }
    )
    inputs, outputs, scores = rollout_generations(batch, Tok())
    assert inputs == ["hi", "hi there"]
    assert outputs == ["!", "there !"]
    assert scores == [1.0, 0.5]


def test_select_val_generations_is_stable_across_input_order():
    inputs = [f"prompt {i}" for i in range(10)]
    outputs = [f"out {i}" for i in range(10)]
    scores = np.arange(10, dtype=np.float32) / 10
    picked = select_val_generations(inputs, outputs, scores, n=3)
    assert len(picked) == 3 and len({p[0] for p in picked}) == 3
    for inp, out, score in picked:  # samples stay aligned
        i = int(inp.split()[1])
        assert out == f"out {i}" and score == pytest.approx(i / 10) and isinstance(score, float)
    order = list(reversed(range(10)))  # same samples arriving in another order -> same pick
    again = select_val_generations([inputs[i] for i in order], [outputs[i] for i in order], scores[order], n=3)
    assert again == picked
    assert select_val_generations(inputs, outputs, scores, n=0) == []
    assert len(select_val_generations(inputs, outputs, scores, n=50)) == 10
