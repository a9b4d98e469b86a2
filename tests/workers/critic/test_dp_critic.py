"""DataParallelPPOCritic on a tiny Qwen2 token-classification model (a value head per token)."""

import logging

import pytest
import torch
from omegaconf import OmegaConf
from transformers import Qwen2Config, Qwen2ForTokenClassification

from tests.plain_attention import bf16_update_through_both_forms
from verl.protocol import DataProto
from verl.utils.model import compute_position_id_with_mask
from verl.workers.critic import DataParallelPPOCritic

VOCAB, P, T, B = 96, 6, 5, 6


def tiny_critic(seed: int = 0) -> Qwen2ForTokenClassification:
    torch.manual_seed(seed)
    cfg = Qwen2Config(
        vocab_size=VOCAB,
        hidden_size=32,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        intermediate_size=64,
        num_labels=1,
        classifier_dropout=0.0,  # the critic worker zeroes dropouts; train-mode dropout would make runs differ
        attn_implementation="sdpa",
    )
    return Qwen2ForTokenClassification(cfg)


def rollout_batch(seed: int = 0) -> DataProto:
    g = torch.Generator().manual_seed(seed)
    prompt_lens, response_lens = [6, 1, 3, 5, 2, 4], [5, 2, 1, 4, 3, 5]
    mask = torch.zeros(B, P + T, dtype=torch.long)
    for i, (pl, rl) in enumerate(zip(prompt_lens, response_lens)):
        mask[i, P - pl : P + rl] = 1
    input_ids = torch.randint(0, VOCAB, (B, P + T), generator=g) * mask
    response_mask = mask[:, P:].float()
    batch = {
        "input_ids": input_ids,
        "attention_mask": mask,
        "position_ids": compute_position_id_with_mask(mask),
        "responses": input_ids[:, P:],
        "values": torch.randn(B, T, generator=g) * 0.1 * response_mask,
        "returns": (torch.rand(B, T, generator=g) + 1.0) * response_mask,
    }
    return DataProto.from_dict(tensors=batch)


def critic_config(**overrides):
    cfg = {
        "strategy": "fsdp",
        "model": {"use_remove_padding": overrides.pop("use_remove_padding", False)},
        "ppo_mini_batch_size": 6,
        "ppo_micro_batch_size_per_gpu": 2,
        "forward_micro_batch_size_per_gpu": 2,
        "use_dynamic_bsz": False,
        "ppo_max_token_len_per_gpu": 2 * (P + T),
        "forward_max_token_len_per_gpu": 2 * (P + T),
        "ulysses_sequence_parallel_size": 1,
        "ppo_epochs": 1,
        "shuffle": False,
        "grad_clip": 1.0,
        "cliprange_value": 0.5,
        "loss_agg_mode": "token-mean",
    }
    cfg.update(overrides)
    return OmegaConf.create(cfg)


def with_meta(data, micro_batch_size=2, use_dynamic_bsz=False, max_token_len=None):
    data.meta_info.update(
        micro_batch_size=micro_batch_size, use_dynamic_bsz=use_dynamic_bsz, max_token_len=max_token_len
    )
    return data


def test_values_equal_the_value_head_before_each_response_token():
    model = tiny_critic()
    critic = DataParallelPPOCritic(critic_config(), model, None)
    data = with_meta(rollout_batch())
    values = critic.compute_values(data)
    assert values.shape == (B, T)
    for i in range(B):
        valid = data.batch["attention_mask"][i].bool()
        ids = data.batch["input_ids"][i][valid].unsqueeze(0)
        with torch.no_grad():
            v = model(input_ids=ids).logits[0, :, 0]
        n_prompt, n_resp = int(valid[:P].sum()), int(valid[P:].sum())
        # The value of the state that emits response token t is read at the position just before it.
        torch.testing.assert_close(values[i, :n_resp], v[n_prompt - 1 : n_prompt - 1 + n_resp], rtol=1e-5, atol=1e-5)
        assert torch.all(values[i, n_resp:] == 0)


@pytest.mark.parametrize(
    "config_kw,meta_kw",
    [
        ({"use_remove_padding": True}, {"micro_batch_size": 4}),
        ({}, {"use_dynamic_bsz": True, "max_token_len": P + T}),
    ],
)
def test_packed_and_dynamic_values_equal_padded(config_kw, meta_kw):
    model = tiny_critic()
    ref = DataParallelPPOCritic(critic_config(), model, None).compute_values(with_meta(rollout_batch()))
    got = DataParallelPPOCritic(critic_config(**config_kw), model, None).compute_values(
        with_meta(rollout_batch(), **meta_kw)
    )
    torch.testing.assert_close(got, ref, rtol=1e-5, atol=1e-5)


def test_update_critic_metrics_and_loss_decreases():
    model = tiny_critic()
    opt = torch.optim.Adam(model.parameters(), lr=3e-3)
    critic = DataParallelPPOCritic(
        critic_config(ppo_mini_batch_size=3, ppo_micro_batch_size_per_gpu=3, cliprange_value=100.0), model, opt
    )
    data = rollout_batch()
    losses = []
    for _ in range(15):
        metrics = critic.update_critic(data)
        losses.append(sum(metrics["critic/vf_loss"]) / len(metrics["critic/vf_loss"]))
    assert set(metrics) == {
        "critic/vf_loss",
        "critic/vf_clipfrac",
        "critic/vpred_mean",
        "critic/grad_norm",
        "critic/nonfinite_skipped",
    }
    assert metrics["critic/nonfinite_skipped"] == [0.0]
    assert len(metrics["critic/grad_norm"]) == 2  # two mini batches of 3
    assert len(metrics["critic/vf_loss"]) == 2  # one micro batch of 3 in each
    assert losses[-1] < 0.5 * losses[0]


def test_non_finite_return_skips_only_its_mini_batch(caplog):
    model = tiny_critic()
    opt = torch.optim.Adam(model.parameters(), lr=3e-3)
    critic = DataParallelPPOCritic(critic_config(ppo_mini_batch_size=3, ppo_micro_batch_size_per_gpu=3), model, opt)
    data = rollout_batch()
    data.batch["returns"][4, 0] = float("inf")  # the second mini batch (rows 3..5)
    data.meta_info["global_steps"] = 7
    snapshots = []
    real_step = critic._optimizer_step

    def recording_step():
        norm = real_step()
        snapshots.append([p.detach().clone() for p in model.parameters()])
        return norm

    critic._optimizer_step = recording_step
    with caplog.at_level(logging.WARNING):
        metrics = critic.update_critic(data)
    assert metrics["critic/nonfinite_skipped"] == [1.0]
    assert "critic update at global step 7, mini batch 1: non-finite loss (micro batch 0" in caplog.text
    assert len(snapshots) == 1  # the first mini batch stepped; the second never reached the optimizer
    assert all(torch.equal(a, b) for a, b in zip(model.parameters(), snapshots[0]))
    assert torch.isnan(torch.tensor(metrics["critic/grad_norm"][1]))


def test_update_critic_with_remove_padding_matches_padded():
    deltas = []
    for rmpad in (False, True):
        model = tiny_critic()
        opt = torch.optim.SGD(model.parameters(), lr=0.1)
        DataParallelPPOCritic(critic_config(use_remove_padding=rmpad), model, opt).update_critic(rollout_batch())
        deltas.append([a.detach() - b.detach() for a, b in zip(model.parameters(), tiny_critic().parameters())])
    for a, b in zip(*deltas):
        torch.testing.assert_close(a, b, rtol=1e-4, atol=1e-6)


def test_values_with_columns_of_padding_in_every_row_equal_the_full_width():
    data = rollout_batch()
    mask = data.batch["attention_mask"]
    mask[:, :2] = 0
    mask[:, -2:] = 0
    data.batch["position_ids"] = compute_position_id_with_mask(mask)
    model = tiny_critic()
    values = DataParallelPPOCritic(critic_config(), model, None).compute_values(with_meta(data))
    with torch.no_grad():
        full = model(input_ids=data.batch["input_ids"], attention_mask=mask, position_ids=data.batch["position_ids"])
    expected = full.logits[:, P - 1 : -1, 0]
    m = mask[:, P:].bool()
    torch.testing.assert_close(values[m], expected[m], rtol=1e-5, atol=1e-5)


def test_bf16_update_on_cpu_attends_through_the_plain_form_and_matches_sdpa(monkeypatch):
    """As the actor's: the critic's update runs attention in verl's CPU form (forward and the backward's recompute)
    and lands within bf16 rounding of the same update through sdpa."""
    calls, difference = bf16_update_through_both_forms(
        monkeypatch,
        tiny_critic,
        lambda model: DataParallelPPOCritic(critic_config(), model, torch.optim.SGD(model.parameters(), lr=1.0)),
        lambda critic: critic.update_critic(rollout_batch()),
    )
    assert calls == 3 * 2 * 2  # 3 micro batches x 2 layers, forward and recompute
    assert difference < 0.1
