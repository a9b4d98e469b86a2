"""The Megatron model on one accelerator (tensor and pipeline parallel 1), against transformers on the same device.

``scripts/gpu_check.sh --part megatron`` runs this file on the lent GPU (megatron-core comes from the wheel folder of
``scripts/build_gpu_wheels.sh``). The local layer spec (torch norms, the spec the engine builds) loads a tiny Qwen2
folder through the project's converter; on the accelerator, in fp32 with TF32 off, its logits must equal
transformers' to 1e-4 and the gradients of the response log-probs, gathered back to HF names by the hand-off
stream, to 1e-4 of the largest. Where TransformerEngine is installed, the same weights in its layer spec (norms fused
into the following linear layers) must give the same logits. Skipped without an accelerator unless
``VERL_GPU_CHECK_DEVICE=cpu`` (then on CPU, the TransformerEngine case skipped).
"""

from __future__ import annotations

import importlib.util

import pytest
import torch

pytest.importorskip("megatron.core", reason="megatron-core is not installed (pip install -e .[megatron])")

from tests.gloo_ranks import spawn_gloo_ranks  # noqa: E402
from tests.workers.engine.megatron.test_megatron_model import _batch  # noqa: E402

TOLERANCE = 1e-4
# the local spec's norm names -> TransformerEngine's (its norms are fused into the next linear layer)
_TE_NAMES = {
    ".input_layernorm.weight": ".self_attention.linear_qkv.layer_norm_weight",
    ".pre_mlp_layernorm.weight": ".mlp.linear_fc1.layer_norm_weight",
}


def _device() -> torch.device:
    return torch.device("cuda") if torch.cuda.is_available() else torch.device("cpu")


def _te_model(hf_config, local_state: dict, device: torch.device):
    """The TransformerEngine-spec ``GPTModel`` of ``hf_config`` holding ``local_state`` (a local-spec state dict)."""
    from megatron.core.models.gpt import GPTModel
    from megatron.core.models.gpt.gpt_layer_specs import get_gpt_layer_with_transformer_engine_spec

    from verl.workers.engine.megatron.model import hf_inv_freq, padded_vocab_size, transformer_config

    config = transformer_config(hf_config, use_cpu_initialization=False)
    model = GPTModel(
        config=config,
        transformer_layer_spec=get_gpt_layer_with_transformer_engine_spec(),
        vocab_size=padded_vocab_size(hf_config.vocab_size, 1),
        max_sequence_length=hf_config.max_position_embeddings,
        parallel_output=False,
        share_embeddings_and_output_weights=bool(hf_config.tie_word_embeddings),
        position_embedding_type="rope",
    ).to(device)
    model.rotary_pos_emb.inv_freq = hf_inv_freq(hf_config).to(device)
    model.hf_vocab_size = hf_config.vocab_size
    state = {}
    for name, tensor in local_state.items():
        for local, te in _TE_NAMES.items():
            name = name.replace(local, te)
        state[name] = tensor
    missing, unexpected = model.load_state_dict(state, strict=False)
    missing = [n for n in missing if not n.endswith("_extra_state")]
    assert not missing and not unexpected, (missing, unexpected)
    return model.eval()


def _compare(rank: int, path: str, use_te: bool, out: str) -> None:
    from transformers import AutoConfig, AutoModelForCausalLM

    from verl.utils.torch_functional import logprobs_from_logits
    from verl.workers.engine.megatron.model import build_gpt_model, gpt_logits, transformer_config
    from verl.workers.engine.megatron.parallel import init_model_parallel
    from verl.workers.engine.megatron.weights import iter_hf_weights, load_hf_weights

    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False
    device = _device()
    init_model_parallel(1, 1, seed=1)
    hf_config = AutoConfig.from_pretrained(path)
    model = build_gpt_model(hf_config, transformer_config(hf_config))
    load_hf_weights(model, hf_config, path)
    model = model.to(device)
    reference = AutoModelForCausalLM.from_pretrained(path, dtype=torch.float32, attn_implementation="eager").to(device)
    input_ids, attention_mask, position_ids = (t.to(device) for t in _batch(hf_config.vocab_size))
    responses, valid = input_ids[:, -5:], attention_mask[:, -5:].bool()
    logits = gpt_logits(model, input_ids, attention_mask, position_ids)
    expected = reference(input_ids=input_ids, attention_mask=attention_mask, position_ids=position_ids).logits
    result = {"device": str(next(model.parameters()).device)}
    result["logits"] = (logits - expected)[attention_mask.bool()].abs().max().item()
    # gradients of the response log-probs, the Megatron ones gathered to HF names by the hand-off stream
    logprobs_from_logits(logits[:, -6:-1], responses)[valid].sum().backward()
    logprobs_from_logits(expected[:, -6:-1], responses)[valid].sum().backward()
    for p in model.parameters():
        p.data, p.grad = p.grad, p.data
    grads = dict(iter_hf_weights(model, hf_config))
    reference_grads = {n: p.grad for n, p in reference.named_parameters()}
    largest = max(g.abs().max().item() for g in reference_grads.values())
    result["grads"] = max((grads[n] - reference_grads[n]).abs().max().item() for n in grads) / largest
    if use_te:
        for p in model.parameters():
            p.data, p.grad = p.grad, None
        te_model = _te_model(hf_config, model.state_dict(), device)
        with torch.no_grad():
            te_logits = gpt_logits(te_model, input_ids, attention_mask, position_ids)
        result["te_logits"] = (te_logits - expected)[attention_mask.bool()].abs().max().item()
    torch.save(result, out)


@pytest.fixture(scope="module")
def model_dir(tmp_path_factory):
    from verl.demo.tiny_model import make_tiny_model_dir

    return make_tiny_model_dir(str(tmp_path_factory.mktemp("megatron_gpu") / "qwen2"))


def test_megatron_local_spec_equals_transformers_on_device(model_dir, tmp_path):
    out = str(tmp_path / "result.pt")
    spawn_gloo_ranks(_compare, 1, model_dir, False, out)
    result = torch.load(out)
    print("megatron local spec vs transformers:", result)
    assert result["device"].startswith(_device().type)
    assert result["logits"] < TOLERANCE and result["grads"] < TOLERANCE, result


@pytest.mark.skipif(importlib.util.find_spec("transformer_engine") is None, reason="TransformerEngine not installed")
def test_megatron_transformer_engine_spec_equals_transformers(model_dir, tmp_path):
    out = str(tmp_path / "result.pt")
    spawn_gloo_ranks(_compare, 1, model_dir, True, out)
    result = torch.load(out)
    print("megatron TransformerEngine spec vs transformers:", result)
    assert result["te_logits"] < TOLERANCE, result
