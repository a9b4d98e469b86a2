"""Selective gradient checkpointing: the backward re-runs only element-wise operations (no matrix product is
recomputed), the gradients are those of full recompute, and under ``auto`` a CPU host takes it only while the
saved products fit in its share of available memory."""

import logging

import pytest
import torch
from torch.utils._python_dispatch import TorchDispatchMode
from transformers import AutoModelForCausalLM

from verl.demo.tiny_model import make_tiny_model_dir
from verl.utils import device
from verl.workers.engine.fsdp import activation_checkpointing as ac
from verl.workers.engine.fsdp.activation_checkpointing import ActivationCheckpointing, product_bytes_per_token
from verl.workers.engine.fsdp.engine import FSDPEngine


class _CountProducts(TorchDispatchMode):
    def __init__(self):
        super().__init__()
        self.products = 0

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        if func in (torch.ops.aten.mm.default, torch.ops.aten.addmm.default):
            self.products += 1
        return func(*args, **(kwargs or {}))


@pytest.fixture(scope="module")
def model_dir(tmp_path_factory):
    return make_tiny_model_dir(str(tmp_path_factory.mktemp("tiny")), num_layers=2)


def _model(model_dir, policy: str | None):
    model = AutoModelForCausalLM.from_pretrained(model_dir, attn_implementation="sdpa")
    checkpointing = None
    if policy is not None:
        checkpointing = ActivationCheckpointing(policy)
        checkpointing.enable(model)
    model.train()
    return model, checkpointing


def _backward_products(model, ids) -> tuple[int, list[torch.Tensor]]:
    """The matrix products the backward runs, and the gradients."""
    logits = model(input_ids=ids, attention_mask=torch.ones_like(ids)).logits
    loss = torch.log_softmax(logits.float(), -1).gather(-1, ids[..., None]).mean()
    with _CountProducts() as counter:
        loss.backward()
    return counter.products, [p.grad for p in model.parameters()]


def test_selective_recomputes_no_product_and_gives_the_gradients_of_full_recompute(model_dir):
    ids = torch.randint(0, 100, (3, 24), generator=torch.Generator().manual_seed(0))
    counts, grads = {}, {}
    for policy in (None, "full", "selective"):
        model, _ = _model(model_dir, policy)
        counts[policy], grads[policy] = _backward_products(model, ids)
    # full recompute re-runs the layers' forward products inside the backward; selective saves them, so its backward
    # runs exactly the products of a backward without checkpointing
    assert counts["selective"] == counts[None] < counts["full"]
    for full, selective, plain in zip(grads["full"], grads["selective"], grads[None], strict=True):
        torch.testing.assert_close(selective, full, rtol=0, atol=0)
        torch.testing.assert_close(selective, plain, rtol=0, atol=0)


def test_auto_is_selective_on_cpu_while_the_products_fit_the_host_share(model_dir, monkeypatch, caplog):
    model, checkpointing = _model(model_dir, "auto")
    per_token = product_bytes_per_token(model)
    monkeypatch.setenv("VERL_HOST_WORKERS", "2")
    # a quarter of what is available, over two workers: room for 1000 tokens' products each
    monkeypatch.setattr(device, "host_memory_available_bytes", lambda: 8 * 1000 * per_token)
    ids = torch.randint(0, 100, (2, 16), generator=torch.Generator().manual_seed(0))
    with caplog.at_level(logging.INFO, logger=ac.__name__):
        assert checkpointing.plan(1000) is True
        assert checkpointing.plan(900) is True
        selective_products, _ = _backward_products(model, ids)
        assert checkpointing.plan(1001) is False
        full_products, _ = _backward_products(model, ids)
    assert selective_products < full_products  # the plan reaches the layers' checkpoints
    lines = [r.getMessage() for r in caplog.records if "gradient checkpointing" in r.getMessage()]
    assert len(lines) == 2, lines  # logged when first chosen and when it changes, not per micro batch
    assert "selective" in lines[0] and "full recompute" in lines[1]


def test_auto_is_full_recompute_on_an_accelerator_and_fixed_policies_do_not_plan(model_dir, monkeypatch):
    monkeypatch.setattr(device, "host_memory_available_bytes", lambda: 1 << 50)
    assert ActivationCheckpointing("auto", device_type="cuda").plan(10) is False
    assert ActivationCheckpointing("full").plan(10) is False
    assert ActivationCheckpointing("selective").plan(1 << 40) is True
    with pytest.raises(ValueError, match="gradient_checkpointing_policy='partial'"):
        ActivationCheckpointing("partial")


def test_products_per_token_count_the_linear_outputs_of_the_checkpointed_layers(model_dir):
    model, _ = _model(model_dir, "full")
    config = model.config
    head_dim = config.hidden_size // config.num_attention_heads
    per_layer = (
        config.num_attention_heads * head_dim  # q
        + 2 * config.num_key_value_heads * head_dim  # k, v
        + config.hidden_size  # o
        + 2 * config.intermediate_size  # gate, up
        + config.hidden_size  # down
    )
    assert product_bytes_per_token(model) == int(config.num_hidden_layers * per_layer * 4 * 1.25)


def test_the_engine_plans_each_training_micro_batch_on_the_tokens_it_computes(model_dir):
    planned = []

    class Recorder(ActivationCheckpointing):
        def plan(self, tokens):
            planned.append(tokens)
            return super().plan(tokens)

    for packed in (False, True):
        model, _ = _model(model_dir, None)
        checkpointing = Recorder("auto")
        checkpointing.enable(model)
        optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3)
        engine = FSDPEngine(model, optimizer, use_remove_padding=packed, gradient_checkpointing=checkpointing)
        # 3 prompt + 3 response columns; the last response column is padding in both rows (trimmed when padded)
        mask = torch.tensor([[0, 1, 1, 1, 1, 0], [1, 1, 1, 1, 0, 0]])
        batch = {
            "input_ids": torch.randint(0, 100, (2, 6), generator=torch.Generator().manual_seed(0)),
            "attention_mask": mask,
            "position_ids": (mask.cumsum(-1) - 1).clamp(min=0),
            "responses": torch.randint(0, 100, (2, 3), generator=torch.Generator().manual_seed(1)),
        }

        def loss_fn(out, micro_batch):
            return -out["log_probs"].mean(), {}

        engine.forward_backward(batch, loss_fn, temperature=1.0)
    assert planned == [10, 8]  # padded: every position of the 5 columns kept; packed: the valid tokens
