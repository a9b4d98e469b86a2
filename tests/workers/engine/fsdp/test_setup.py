"""The FSDP engine's setup: the optimizer (torch's fused AdamW kernel on CPU, the same update as the per-tensor loop)
and the LoRA adapters (model.exclude_modules, model.lora_adapter_path)."""

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
