"""The Megatron model built from an HF config, the HF<->Megatron converter and the CPU covers, against transformers.

Each case runs in spawned gloo processes (megatron-core's parallel state is process-global): TP=1 and TP=2 logits and
log-probs equal transformers' in fp32; HF -> Megatron -> HF is exact, tensor by tensor. At TP=2 the logits are
gathered by megatron-core's own tensor-parallel gather, under the CPU device cover.
"""

from __future__ import annotations

import json
import os

import pytest
import torch

pytest.importorskip("megatron.core", reason="megatron-core is not installed (pip install -e .[megatron])")

from tests.gloo_ranks import spawn_gloo_ranks  # noqa: E402
from verl.demo.tiny_model import make_tiny_model_dir  # noqa: E402
from verl.workers.engine.megatron.cpu_shims import CPURNGStatesTracker, cpu_current_device, rng_seeds  # noqa: E402

TOLERANCE = 1e-4


def _batch(vocab_size: int, seed: int = 0, length: int = 12):
    """Three left-padded rows of ``length`` tokens, the last 5 the response."""
    g = torch.Generator().manual_seed(seed)
    input_ids = torch.randint(0, vocab_size, (3, length), generator=g)
    attention_mask = torch.ones(3, length, dtype=torch.long)
    attention_mask[0, :4] = 0
    attention_mask[1, :2] = 0
    attention_mask[2, -1] = 0  # a right-padded response too
    position_ids = (attention_mask.cumsum(-1) - 1).clamp(min=0)
    return input_ids, attention_mask, position_ids


def _compare_with_transformers(
    rank: int, path: str, tp: int, out_dir: str, check_grads: bool = False, sequence_parallel: bool = False
) -> None:
    from transformers import AutoConfig, AutoModelForCausalLM

    from verl.utils.torch_functional import logprobs_from_logits
    from verl.workers.engine.megatron.model import build_gpt_model, gpt_logits, transformer_config
    from verl.workers.engine.megatron.parallel import init_model_parallel
    from verl.workers.engine.megatron.weights import (
        HFCheckpointReader,
        iter_hf_weights,
        load_hf_weights,
        merge_stage_shards,
    )

    init_model_parallel(tp, 1, seed=1)
    hf_config = AutoConfig.from_pretrained(path)
    tf_config = transformer_config(hf_config, tp_size=tp, sequence_parallel=sequence_parallel)
    model = build_gpt_model(hf_config, tf_config).eval()
    load_hf_weights(model, hf_config, path)
    reference = AutoModelForCausalLM.from_pretrained(path, dtype=torch.float32, attn_implementation="eager").eval()
    length = 11 if sequence_parallel else 12  # under sequence parallelism: padded to 12, the padding cut off
    input_ids, attention_mask, position_ids = _batch(hf_config.vocab_size, length=length)
    with torch.no_grad():
        logits = gpt_logits(model, input_ids, attention_mask, position_ids)
        expected = reference(input_ids=input_ids, attention_mask=attention_mask, position_ids=position_ids).logits
    valid = attention_mask.bool()
    responses = input_ids[:, -5:]
    log_probs = logprobs_from_logits(logits[:, -6:-1], responses)
    expected_log_probs = logprobs_from_logits(expected[:, -6:-1], responses)
    response_valid = valid[:, -5:]
    reader = HFCheckpointReader(path)
    names, exact = [], True
    # the HF rollout's hand-off target: an empty HF model filled from the stream (checkpoint names into its in-memory
    # tensors, fused experts included) must equal transformers' own load of the folder
    from verl.workers.engine.megatron.handoff import _target, empty_hf_model

    rollout_model = empty_hf_model(hf_config, torch.float32)
    rollout_params = dict(rollout_model.named_parameters())
    for name, tensor in iter_hf_weights(model, hf_config):
        names.append(name)
        exact = exact and torch.equal(tensor, reader.get(name))
        with torch.no_grad():
            _target(rollout_params, name).copy_(tensor)
    reference_state = reference.state_dict()
    exact = exact and all(torch.equal(t, reference_state[n]) for n, t in rollout_model.state_dict().items())
    # the model merger's path: every tensor-parallel rank's state dict merged without a process group
    shards = [None] * tp
    torch.distributed.all_gather_object(shards, model.state_dict())
    merged = merge_stage_shards(shards, hf_config, layer_offset=0)
    grads = _grads_against_transformers(model, reference, hf_config, length) if check_grads else 0.0
    result = {"grads": grads}
    result |= {
        "merged_exact": set(merged) == set(names) and all(torch.equal(t, reader.get(n)) for n, t in merged.items()),
        "logits": (logits - expected)[valid].abs().max().item(),
        "log_probs": (log_probs - expected_log_probs)[response_valid].abs().max().item(),
        "names": names,
        "exact": exact,
    }
    with open(os.path.join(out_dir, f"rank{rank}.json"), "w") as f:
        json.dump(result, f)


def _grads_against_transformers(model, reference, hf_config, length: int) -> float:
    """Largest difference of the gradients of the responses' log-probs (after the engine's sum of partial
    gradients over tensor parallelism, gathered to HF names) from transformers', relative to its largest."""
    from verl.utils.torch_functional import logprobs_from_logits
    from verl.workers.engine.megatron.model import gpt_logits, sum_partial_gradients
    from verl.workers.engine.megatron.weights import iter_hf_weights

    input_ids, attention_mask, position_ids = _batch(hf_config.vocab_size, length=length)
    responses, valid = input_ids[:, -5:], attention_mask[:, -5:].bool()
    logits = gpt_logits(model, input_ids, attention_mask, position_ids)
    expected = reference(input_ids=input_ids, attention_mask=attention_mask, position_ids=position_ids).logits
    with cpu_current_device():  # the backward of megatron-core's sequence-parallel linears allocates there
        logprobs_from_logits(logits[:, -6:-1], responses)[valid].sum().backward()
    logprobs_from_logits(expected[:, -6:-1], responses)[valid].sum().backward()
    sum_partial_gradients(model)
    data = {p: p.data for p in model.parameters()}
    for p in model.parameters():
        p.data = p.grad
    grads = dict(iter_hf_weights(model, hf_config))
    for p, d in data.items():
        p.data = d
    # in the checkpoint's names (transformers >= 5 fuses a mixture of experts' weights in memory)
    from verl.workers.sharding_manager.fsdp_weights import checkpoint_layout

    to_checkpoint = checkpoint_layout(reference) or (lambda n, t: [(n, t)])
    reference_grads = {k: g for n, p in reference.named_parameters() for k, g in to_checkpoint(n, p.grad)}
    largest = max(g.abs().max().item() for g in reference_grads.values())
    return max((grads[n] - reference_grads[n]).abs().max().item() for n in grads) / largest


def _run(
    tmp_path,
    tp: int,
    path: str | None = None,
    check_grads: bool = False,
    sequence_parallel: bool = False,
    **model_kwargs,
) -> list[dict]:
    path = path or make_tiny_model_dir(str(tmp_path / "model"), **model_kwargs)
    spawn_gloo_ranks(_compare_with_transformers, tp, path, tp, str(tmp_path), check_grads, sequence_parallel)
    from safetensors import safe_open

    with safe_open(os.path.join(path, "model.safetensors"), "pt") as f:
        hf_names = set(f.keys())
    results = [json.loads((tmp_path / f"rank{r}.json").read_text()) for r in range(tp)]
    for result in results:
        assert result["logits"] < TOLERANCE and result["log_probs"] < TOLERANCE, result
        assert result["exact"] and set(result["names"]) == hf_names  # every HF tensor, none other, bit for bit
        assert result["merged_exact"] and result["grads"] < TOLERANCE, result
    return results


def test_qwen2_tp1_equals_transformers_and_round_trips(tmp_path):
    _run(tmp_path, tp=1, model_type="qwen2")


def test_qwen2_tp2_tied_embeddings_equals_transformers_and_gathers_exactly(tmp_path):
    # vocabulary 259: padded to 260 for two vocabulary shards, the padding cut from the logits
    results = _run(tmp_path, tp=2, model_type="qwen2", tie_word_embeddings=True)
    assert results[0]["names"] == results[1]["names"]  # the same sequence on every rank


def test_qwen3_qk_norm_tp2_equals_transformers_and_round_trips(tmp_path):
    """Qwen3: per-head query and key RMSNorms before rope (drawn away from ones here, q and k apart, so a swap or a
    missed norm shows), an explicit head_dim (64) other than hidden / heads (16), tied embeddings. The gradients too:
    each tensor-parallel rank holds the q/k norms' gradient from its own heads only, and the engine sums them."""
    from safetensors.torch import load_file, save_file

    path = make_tiny_model_dir(str(tmp_path / "model"), family="qwen3")
    weights_file = os.path.join(path, "model.safetensors")
    state = load_file(weights_file)
    g = torch.Generator().manual_seed(3)
    norms = [name for name in state if name.endswith(("q_norm.weight", "k_norm.weight"))]
    assert norms and state[norms[0]].shape == (64,)
    for name in norms:
        state[name] = 1 + 0.5 * torch.randn(state[name].shape, generator=g)
    save_file(state, weights_file, metadata={"format": "pt"})
    results = _run(tmp_path, tp=2, path=path, check_grads=True)  # the q/k norms' gradients summed over both ranks
    assert set(norms) <= set(results[0]["names"])


def test_qwen2_tp2_sequence_parallel_equals_transformers(tmp_path):
    """Sequence parallelism at TP=2 on an odd length (11, padded to 12 and cut back): logits, log-probs and the
    gradients (the norms' partial gradients summed over both ranks) against transformers."""
    _run(tmp_path, tp=2, check_grads=True, sequence_parallel=True, model_type="qwen2", tie_word_embeddings=True)


def test_llama_with_llama3_rope_scaling_equals_transformers(tmp_path):
    path = make_tiny_model_dir(str(tmp_path / "model"), model_type="llama")
    config_file = os.path.join(path, "config.json")
    with open(config_file) as f:
        config = json.load(f)
    scaling = {"factor": 8.0, "low_freq_factor": 1.0, "high_freq_factor": 4.0, "original_max_position_embeddings": 16}
    config["rope_parameters"] = {"rope_type": "llama3", "rope_theta": 500000.0, **scaling}
    config.pop("rope_scaling", None)
    config["rope_theta"] = 500000.0
    with open(config_file, "w") as f:
        json.dump(config, f)
    from transformers import AutoConfig

    from verl.workers.engine.megatron.model import hf_inv_freq

    plain = hf_inv_freq(AutoConfig.from_pretrained(path))
    default = 1.0 / (500000.0 ** (torch.arange(0, plain.numel() * 2, 2).float() / (plain.numel() * 2)))
    assert not torch.allclose(plain, default)  # the scaling changes some frequencies: the case tests something
    spawn_gloo_ranks(_compare_with_transformers, 1, path, 1, str(tmp_path))
    result = json.loads((tmp_path / "rank0.json").read_text())
    assert result["logits"] < TOLERANCE and result["exact"] and result["merged_exact"]


def test_unsupported_models_are_refused_by_name():
    from transformers import GemmaConfig, LlamaConfig

    from verl.workers.engine.megatron.model import check_supported

    with pytest.raises(ValueError, match="model_type is 'gemma'"):
        check_supported(GemmaConfig())
    config = LlamaConfig(rope_parameters={"rope_type": "yarn", "rope_theta": 10000.0, "factor": 4.0})
    with pytest.raises(ValueError, match="rope_type='yarn'"):
        check_supported(config)


# ------------------------------------------------------------------------------------------------ the CPU covers
def test_cpu_current_device_names_the_cpu_only_inside_the_block():
    if torch.cuda.is_available():
        pytest.skip("the cover is a no-op with CUDA")
    from megatron.core.utils import GlobalMemoryBuffer

    original, original_cuda, original_sync = torch.cuda.current_device, torch.Tensor.cuda, torch.cuda.synchronize
    x = torch.arange(6.0).reshape(2, 3)
    with cpu_current_device():
        buffer = GlobalMemoryBuffer().get_tensor((2, 3), torch.float32, "t")
        buffer.copy_(x)
        moved = x.cuda()
        torch.cuda.synchronize()  # the checkpoint writer's wait after its host copies: nothing to wait for
    assert buffer.device.type == "cpu" and torch.equal(buffer, x) and moved is x
    assert torch.cuda.current_device is original and torch.Tensor.cuda is original_cuda  # restored
    assert torch.cuda.synchronize is original_sync


def test_rotary_embedding_under_the_cover_equals_the_formula():
    from megatron.core.models.common.embeddings.rotary_pos_embedding import RotaryEmbedding

    with cpu_current_device():
        rotary = RotaryEmbedding(kv_channels=8, rotary_percent=1.0, rotary_base=100, use_cpu_initialization=True)
        emb = rotary(5)  # (seq, 1, 1, dim): angles of each position
    inv_freq = 1.0 / (100 ** (torch.arange(0, 8, 2).float() / 8))
    angles = torch.outer(torch.arange(5).float(), inv_freq)
    assert torch.allclose(emb.squeeze(1).squeeze(1), torch.cat([angles, angles], dim=-1))


def test_cpu_rng_tracker_forks_seeded_streams_and_leaves_the_default_one_alone():
    tracker = CPURNGStatesTracker()
    seeds = rng_seeds(7, tp_rank=1)
    for name, seed in seeds.items():
        tracker.add(name, seed)
    expected = torch.Generator().manual_seed(seeds["model-parallel-rng"])
    torch.manual_seed(123)
    default_next = torch.rand(3, generator=torch.Generator().manual_seed(123))
    with tracker.fork():
        first = torch.rand(4)
    with tracker.fork("model-parallel-rng"):
        second = torch.rand(4)  # the stream goes on where the first fork left it
    assert torch.equal(torch.rand(3), default_next)
    assert torch.equal(first, torch.rand(4, generator=expected))
    assert torch.equal(second, torch.rand(4, generator=expected))
    # dropout under a fork draws its mask from the named stream: as dropout on a generator seeded alike
    x = torch.ones(1000)
    with tracker.fork("data-parallel-rng"):
        dropped = torch.nn.functional.dropout(x, p=0.5)
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seeds["data-parallel-rng"])
        expected_dropped = torch.nn.functional.dropout(x, p=0.5)
    assert torch.equal(dropped, expected_dropped) and 300 < int((dropped == 0).sum()) < 700
    with pytest.raises(ValueError, match="already tracked"):
        tracker.add("other", seeds["data-parallel-rng"])
    with pytest.raises(KeyError, match="not tracked"):
        with tracker.fork("missing"):
            pass


def test_qwen3_moe_equals_transformers_and_round_trips(tmp_path):
    """Qwen3-MoE (4 experts, top 2, norm_topk_prob, q/k norms, no shared expert): HF's router ``mlp.gate`` and the
    checkpoint's per-expert ``mlp.experts.{e}.*_proj`` into megatron-core's router and local experts (SequentialMLP,
    the allgather token dispatcher) and back bit for bit; logits, log-probs and gradients equal transformers'."""
    path = make_tiny_model_dir(str(tmp_path / "model"), family="qwen3-moe", num_layers=2)
    _run(tmp_path, tp=1, path=path, check_grads=True)
