"""The FSDP engine's setup: the optimizer (torch's fused AdamW kernel on CPU, the same update as the per-tensor loop)
and the LoRA adapters (model.exclude_modules, model.lora_adapter_path)."""

import math

import pytest
import torch

from verl.trainer.config import OptimConfig
from verl.workers.engine.fsdp.setup import build_optimizer, cpu_fused_adamw


def _module(seed: int) -> torch.nn.Module:
    torch.manual_seed(seed)
    return torch.nn.Sequential(torch.nn.Linear(16, 32), torch.nn.Tanh(), torch.nn.Linear(32, 4))


def test_cpu_parameters_get_the_fused_kernel_and_the_same_update_as_the_loop():
    fused_model, loop_model = _module(0), _module(0)
    config = OptimConfig(lr=1e-2, weight_decay=0.01, betas=[0.9, 0.999])
    fused, _ = build_optimizer(fused_model, config)
    loop = torch.optim.AdamW(loop_model.parameters(), lr=1e-2, weight_decay=0.01, betas=(0.9, 0.999), foreach=False)
    assert fused.param_groups[0]["fused"] is True
    x = torch.randn(8, 16, generator=torch.Generator().manual_seed(1))
    for _ in range(3):
        for model, optimizer in ((fused_model, fused), (loop_model, loop)):
            optimizer.zero_grad()
            model(x).square().mean().backward()
            optimizer.step()
    for got, want in zip(fused_model.parameters(), loop_model.parameters(), strict=True):
        torch.testing.assert_close(got, want, rtol=1e-6, atol=1e-7)
    moved = [not torch.equal(a, b) for a, b in zip(fused_model.parameters(), _module(0).parameters(), strict=True)]
    assert all(moved)


def test_parameters_the_fused_kernel_cannot_take_keep_torchs_choice():
    assert cpu_fused_adamw([]) == {}
    assert cpu_fused_adamw([torch.nn.Parameter(torch.zeros(2, device="meta"))]) == {}
    assert cpu_fused_adamw([torch.nn.Parameter(torch.zeros(2))]) == {"fused": True}


def _lr_factors(optim_config: OptimConfig, steps: int) -> list[float]:
    optimizer, scheduler = build_optimizer(_module(0), optim_config)
    factors = []
    for _ in range(steps):
        factors.append(optimizer.param_groups[0]["lr"] / optim_config.lr)
        optimizer.step()
        scheduler.step()
    return factors


def test_optimizer_class_and_its_extra_arguments_come_from_the_config():
    """optim.optimizer / optimizer_impl name the class (betas go to the Adam family only);
    override_optimizer_config adds constructor arguments."""
    sgd, _ = build_optimizer(
        _module(0),
        OptimConfig(lr=0.1, optimizer="SGD", optimizer_impl="torch.optim", override_optimizer_config={"momentum": 0.9}),
    )
    assert type(sgd) is torch.optim.SGD and "betas" not in sgd.defaults
    assert (sgd.defaults["momentum"], sgd.defaults["weight_decay"]) == (0.9, 0.01)
    adam, _ = build_optimizer(_module(0), OptimConfig(optimizer="Adam", override_optimizer_config={"eps": 1e-5}))
    assert type(adam) is torch.optim.Adam and (adam.defaults["eps"], adam.defaults["betas"]) == (1e-5, (0.9, 0.999))


def test_lr_scheduler_type_and_its_older_name_give_one_schedule():
    cosine = dict(lr=1.0, total_training_steps=4, lr_warmup_steps=0, min_lr_ratio=0.0)
    by_new_name = _lr_factors(OptimConfig(lr_scheduler_type="cosine", **cosine), 5)
    assert by_new_name == pytest.approx([1.0, (1 + math.cos(math.pi / 4)) / 2, 0.5, (1 - math.cos(math.pi / 4)) / 2, 0])
    assert _lr_factors(OptimConfig(warmup_style="cosine", **cosine), 5) == by_new_name
    # counted from 1: each factor is the next step's
    one_indexed = _lr_factors(OptimConfig(lr_scheduler_type="cosine", zero_indexed_step=False, **cosine), 4)
    assert one_indexed == pytest.approx(by_new_name[1:])
    assert _lr_factors(OptimConfig(lr=1.0), 3) == [1.0, 1.0, 1.0]


# ------------------------------------------------------------------------------------------------ LoRA adapters
def _tiny_causal_lm(seed: int = 0):
    from transformers import Qwen2Config, Qwen2ForCausalLM

    torch.manual_seed(seed)
    config = Qwen2Config(
        vocab_size=64, hidden_size=32, intermediate_size=48, num_hidden_layers=2, num_attention_heads=2,
        num_key_value_heads=1, max_position_embeddings=64,
    )  # fmt: skip
    return Qwen2ForCausalLM(config)


def _adapted(model) -> set[str]:
    """Names of the modules PEFT gave an adapter (``...layers.0.self_attn.q_proj``)."""
    names = {name.rsplit(".lora_A", 1)[0] for name, _ in model.named_parameters() if ".lora_A." in name}
    return {name.removeprefix("base_model.model.") for name in names}


def test_lora_exclude_modules_as_a_regex_and_as_names():
    """model.exclude_modules: a string is a regex over each module's full name (verl's '.*visual.*' style), a list
    names modules by their last parts; either way those layers keep no adapter while the rest of all-linear do."""
    from verl.workers.config import HFModelConfig
    from verl.workers.engine.fsdp.setup import apply_lora

    everything = _adapted(apply_lora(_tiny_causal_lm(), HFModelConfig(lora_rank=4)))
    assert {"model.layers.0.self_attn.q_proj", "model.layers.1.mlp.down_proj"} <= everything
    regex = _adapted(apply_lora(_tiny_causal_lm(), HFModelConfig(lora_rank=4, exclude_modules=r".*layers\.0\..*")))
    assert regex == {name for name in everything if ".layers.0." not in name} and regex
    names = _adapted(apply_lora(_tiny_causal_lm(), HFModelConfig(lora_rank=4, exclude_modules=["q_proj", "down_proj"])))
    assert names == {name for name in everything if not name.endswith(("q_proj", "down_proj"))}


def test_lora_adapter_path_continues_from_the_saved_adapter(tmp_path):
    """model.lora_adapter_path: the adapter saved by a run (PEFT's layout, as a LoRA checkpoint's lora_adapter/)
    comes back trainable with its own rank and targets, and the model computes what the saved one did."""
    from verl.workers.config import HFModelConfig
    from verl.workers.engine.fsdp.setup import apply_lora

    trained = apply_lora(_tiny_causal_lm(), HFModelConfig(lora_rank=4, lora_alpha=8, target_modules=["v_proj"]))
    with torch.no_grad():  # a trained adapter: B is no longer zero
        for name, param in trained.named_parameters():
            if "lora_B" in name:
                param.normal_(generator=torch.Generator().manual_seed(3))
    trained.save_pretrained(tmp_path / "adapter")
    config = HFModelConfig(lora_rank=16, lora_adapter_path=str(tmp_path / "adapter"))  # its own rank 4 applies
    loaded = apply_lora(_tiny_causal_lm(), config)
    assert loaded.peft_config["default"].r == 4
    assert (
        _adapted(loaded) == _adapted(trained) == {"model.layers.0.self_attn.v_proj", "model.layers.1.self_attn.v_proj"}
    )
    trainable = {name for name, param in loaded.named_parameters() if param.requires_grad}
    assert trainable and all("lora_" in name for name in trainable)
    ids = torch.randint(0, 64, (2, 7), generator=torch.Generator().manual_seed(0))
    with torch.no_grad():
        expected = trained(input_ids=ids).logits
        torch.testing.assert_close(loaded(input_ids=ids).logits, expected)
        with loaded.disable_adapter():  # the base model differs: the adapter is really applied
            assert not torch.allclose(loaded(input_ids=ids).logits, expected)
