"""Rows of a padded micro batch run in groups of like length: the grouping, the reassembly, and the engine's
no-grad passes through it (same log-probs, entropy and values as one forward over every row)."""

import pytest
import torch
from transformers import Qwen2Config, Qwen2ForCausalLM, Qwen2ForTokenClassification

from verl.protocol import DataProto
from verl.utils.model import compute_position_id_with_mask
from verl.workers.engine.fsdp.engine import FSDPEngine
from verl.workers.engine.width_groups import forward_by_groups, width_groups

PROMPT, RESPONSE = 6, 40


def _mask(prompt_lengths, response_lengths):
    mask = torch.zeros(len(prompt_lengths), PROMPT + RESPONSE, dtype=torch.long)
    for row, (p, r) in enumerate(zip(prompt_lengths, response_lengths)):
        mask[row, PROMPT - p : PROMPT + r] = 1
    return mask


def _padded_cost(mask, groups):
    """Padded tokens the trimmed forwards of ``groups`` compute (one group: every row)."""
    total = 0
    for rows in groups:
        used = mask[rows].any(dim=0).nonzero()
        start, end = min(int(used[0]), PROMPT - 1), max(int(used[-1]) + 1, PROMPT)
        total += len(rows) * (end - start)
    return total


def test_rows_of_one_length_stay_one_group():
    assert width_groups(_mask([3, 5, 4], [RESPONSE] * 3), RESPONSE) is None
    assert width_groups(_mask([3], [2]), RESPONSE) is None
    # a split that saves fewer padded tokens than a forward call costs is not made
    assert width_groups(_mask([5, 5, 5], [40, 40, 30]), RESPONSE, per_call_tokens=64) is None


def test_groups_cover_every_row_once_and_cut_the_padding():
    responses = [40, 3, 38, 5, 40, 20, 4, 40, 19, 2]
    mask = _mask([5, 6, 5, 4, 6, 5, 5, 3, 6, 5], responses)
    groups = width_groups(mask, RESPONSE, per_call_tokens=16)
    assert groups is not None and len(groups) >= 2
    assert sorted(torch.cat(groups).tolist()) == list(range(len(responses)))
    assert all(torch.equal(g, g.sort().values) for g in groups)
    one = _padded_cost(mask, [torch.arange(len(responses))])
    assert _padded_cost(mask, groups) + 16 * (len(groups) - 1) < one
    # the short responses are grouped apart from the long ones
    short = {1, 3, 6, 9}
    assert any(set(g.tolist()) == short for g in groups)


def test_forward_by_groups_puts_outputs_back_in_row_order():
    batch = {"x": torch.arange(6).float().unsqueeze(-1) * torch.ones(6, 3), "y": torch.arange(6)}
    groups = [torch.tensor([1, 4]), torch.tensor([0, 2, 3, 5])]
    seen = []

    def forward(mb):
        seen.append(mb["y"].tolist())
        return {"double": mb["x"] * 2, "none": None}

    out = forward_by_groups(batch, groups, forward)
    assert seen == [[1, 4], [0, 2, 3, 5]]
    assert torch.equal(out["double"], batch["x"] * 2) and out["none"] is None


def _data(vocab, responses):
    torch.manual_seed(1)
    mask = _mask([4, 6, 5, 6, 3, 5], responses)
    ids = torch.randint(0, vocab, mask.shape) * mask
    return DataProto.from_dict(
        {
            "input_ids": ids,
            "attention_mask": mask,
            "position_ids": compute_position_id_with_mask(mask),
            "responses": ids[:, PROMPT:],
        },
        meta_info={"micro_batch_size": 6, "temperature": 0.7, "use_dynamic_bsz": False, "calculate_entropy": True},
    )


@pytest.mark.parametrize("kind", ["policy", "value"])
def test_engine_no_grad_pass_by_groups_matches_one_forward(kind, monkeypatch):
    monkeypatch.setattr("verl.workers.engine.width_groups.PER_CALL_TOKENS", 16)  # a tiny batch: cheap calls
    torch.manual_seed(0)
    config = Qwen2Config(
        vocab_size=64, hidden_size=32, num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2,
        intermediate_size=64, num_labels=1, attn_implementation="sdpa",
    )  # fmt: skip
    model = (Qwen2ForCausalLM if kind == "policy" else Qwen2ForTokenClassification)(config).eval()
    engine = FSDPEngine(model, None, None, kind=kind)
    assert engine._group_by_width  # CPU, padded, one process
    data = _data(64, [40, 2, 38, 4, 40, 3])
    widths = []
    hook = model.register_forward_pre_hook(lambda _m, _a, kw: widths.append(kw["input_ids"].shape), with_kwargs=True)
    grouped = engine.infer(data)
    engine._group_by_width = False
    whole = engine.infer(data)
    hook.remove()
    assert len(widths) == 3 and widths[-1] == (6, PROMPT + RESPONSE)  # two groups, then one forward
    assert sorted(w[0] for w in widths[:2]) == [3, 3] and min(w[1] for w in widths[:2]) == PROMPT + 4
    response_mask = data.batch["attention_mask"][:, PROMPT:].bool()
    assert grouped.keys() == whole.keys()
    for key in grouped:
        torch.testing.assert_close(grouped[key][response_mask], whole[key][response_mask], rtol=1e-5, atol=1e-5)


def test_engine_keeps_one_forward_when_packed():
    config = Qwen2Config(vocab_size=64, hidden_size=32, num_hidden_layers=1, num_attention_heads=4,
                         num_key_value_heads=2, intermediate_size=64)  # fmt: skip
    engine = FSDPEngine(Qwen2ForCausalLM(config).eval(), None, None, kind="policy", use_remove_padding=True)
    assert not engine._group_by_width
