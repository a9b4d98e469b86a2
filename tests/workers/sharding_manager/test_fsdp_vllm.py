"""FSDPVLLMShardingManager against a stand-in engine (no vLLM needed): what it streams, in which names, the tied
LM head fix-up, prefix-cache reset, timing, and the TP gather/split of data on 2 gloo ranks with FSDP2."""

from types import SimpleNamespace

import numpy as np
import torch
import torch.nn as nn
from transformers import Qwen2Config, Qwen2ForCausalLM

from tests.gloo_ranks import spawn_gloo_ranks
from verl.protocol import DataProto
from verl.workers.sharding_manager.fsdp_vllm import FSDPVLLMShardingManager, normalize_weight_name


def tiny_lm(tied: bool = False) -> Qwen2ForCausalLM:
    torch.manual_seed(0)
    cfg = Qwen2Config(
        vocab_size=64,
        hidden_size=32,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        intermediate_size=64,
        tie_word_embeddings=tied,
    )
    return Qwen2ForCausalLM(cfg)


class FakeQuant:
    def __init__(self):
        self.calls = 0

    def process_weights_after_loading(self, layer):
        self.calls += 1
        layer.packed = layer.weight.detach().clone()  # what the CPU backend does: a private copy of the weight


class FakeVllmModel(nn.Module):
    """Just the parts the manager touches: ``model.embed_tokens`` and an ``lm_head`` with a quant method."""

    def __init__(self, vocab: int, hidden: int):
        super().__init__()
        self.model = nn.Module()
        self.model.embed_tokens = nn.Embedding(vocab, hidden)
        self.lm_head = nn.Module()
        self.lm_head.weight = nn.Parameter(torch.empty(0))  # the CPU backend leaves an empty parameter behind
        self.lm_head.quant_method = FakeQuant()


class FakeWorker:
    def __init__(self, vllm_model: FakeVllmModel):
        self.loaded: list[tuple[str, torch.Tensor]] = []
        self.vllm_model = vllm_model
        self.model_runner = SimpleNamespace(get_model=lambda: vllm_model)

    def reload_weights(self, weights_iterator, is_checkpoint_format):
        assert is_checkpoint_format
        for name, tensor in weights_iterator:
            self.loaded.append((name, tensor.clone()))
            if name == "model.embed_tokens.weight":
                self.vllm_model.model.embed_tokens.weight.data.copy_(tensor)


class FakeLLM:
    """Stand-in for an in-process ``vllm.LLM``: collective_rpc runs the callable on the one worker."""

    def __init__(self, vocab: int = 64, hidden: int = 32):
        self.worker = FakeWorker(FakeVllmModel(vocab, hidden))
        self.prefix_resets = 0
        self.llm_engine = SimpleNamespace(
            vllm_config=SimpleNamespace(model_config=SimpleNamespace(enable_sleep_mode=False))
        )

    def collective_rpc(self, method, args=(), kwargs=None):
        return [method(self.worker, *args, **(kwargs or {}))]

    def reset_prefix_cache(self):
        self.prefix_resets += 1


def test_names_are_normalized():
    name = "_fsdp_wrapped_module.model.layers.0._checkpoint_wrapped_module.mlp._orig_mod.up_proj.weight"
    assert normalize_weight_name(name) == "model.layers.0.mlp.up_proj.weight"


def test_streams_the_full_state_dict_and_resets_the_prefix_cache():
    model = tiny_lm()
    engine = FakeLLM()
    manager = FSDPVLLMShardingManager(model, SimpleNamespace(inference_engine=engine), model.config)
    model.eval()
    with manager as entered:
        assert entered is manager
    assert model.training  # back in training mode after generation
    assert engine.prefix_resets == 1
    assert manager.timing["reshard"] > 0
    loaded = dict(engine.worker.loaded)
    expected = model.state_dict()
    assert list(loaded) == list(expected)
    for name, tensor in expected.items():
        assert torch.equal(loaded[name], tensor), name
    # a second step sends the current (changed) weights
    with torch.no_grad():
        model.lm_head.weight.add_(1.0)
    engine.worker.loaded.clear()
    with manager:
        pass
    assert torch.equal(dict(engine.worker.loaded)["lm_head.weight"], model.lm_head.weight)
    assert engine.prefix_resets == 2


def test_tied_head_is_skipped_and_re_tied_to_the_new_embedding():
    model = tiny_lm(tied=True)
    engine = FakeLLM()
    manager = FSDPVLLMShardingManager(model, engine, model.config)
    with torch.no_grad():
        model.model.embed_tokens.weight.mul_(3.0)
    with manager:
        pass
    names = [name for name, _ in engine.worker.loaded]
    assert "lm_head.weight" not in names and "model.embed_tokens.weight" in names
    vllm_model = engine.worker.vllm_model
    assert vllm_model.lm_head.weight is vllm_model.model.embed_tokens.weight
    assert vllm_model.lm_head.quant_method.calls == 1
    assert torch.equal(vllm_model.lm_head.packed, model.model.embed_tokens.weight)


# ------------------------------------------------------------------ 2 ranks: FSDP2 gather + TP data split
WORLD = 2


def _worker(rank: int):
    torch.set_num_threads(1)
    from torch.distributed.device_mesh import init_device_mesh

    from verl.utils.fsdp_utils import wrap_model_for_training

    full = tiny_lm().state_dict()
    fsdp_mesh = init_device_mesh("cpu", (WORLD,), mesh_dim_names=("fsdp",))
    model = wrap_model_for_training(tiny_lm(), "fsdp2", fsdp_mesh)
    rollout_mesh = init_device_mesh("cpu", (1, WORLD), mesh_dim_names=("dp", "infer_tp"))
    engine = FakeLLM()
    manager = FSDPVLLMShardingManager(model, engine, model.config, device_mesh=rollout_mesh)
    with manager:
        ids = torch.arange(4).view(2, 2) + 10 * rank
        data = DataProto.from_dict(tensors={"ids": ids}, non_tensors={"r": np.array([rank, rank])})
        gathered = manager.preprocess_data(data)
        expected = torch.cat([torch.arange(4).view(2, 2) + 10 * r for r in range(WORLD)])
        assert torch.equal(gathered.batch["ids"], expected)
        back = manager.postprocess_data(gathered)
        assert torch.equal(back.batch["ids"], ids) and list(back.non_tensor_batch["r"]) == [rank, rank]
    loaded = dict(engine.worker.loaded)
    assert list(loaded) == list(full)  # unsharded names, full tensors, on every rank
    for name, tensor in full.items():
        assert loaded[name].shape == tensor.shape, name
        assert torch.equal(loaded[name], tensor), name


def test_fsdp2_shards_are_gathered_and_tp_data_round_trips():
    spawn_gloo_ranks(_worker, WORLD)


# ------------------------------------------------------------------ 2 ranks: FSDP1 streams one unit at a time
def _gathered_units(root: nn.Module) -> list[str]:
    """Names of the FSDP1 units whose full (unsharded) flat parameter is allocated right now."""
    from torch.distributed.fsdp import FullyShardedDataParallel as FSDP

    return [
        name
        for name, unit in root.named_modules()
        if isinstance(unit, FSDP)
        and unit._handle is not None
        and unit._handle.flat_param._full_param_padded.untyped_storage().size() > 0
    ]


def _fsdp1_worker(rank: int, paths: list[str]):
    torch.set_num_threads(1)
    from torch.distributed.fsdp import FullyShardedDataParallel as FSDP
    from transformers import AutoModelForCausalLM

    from verl.utils.fsdp_utils import get_fsdp_full_state_dict, get_fsdp_wrap_policy

    for path in paths:
        hf = AutoModelForCausalLM.from_pretrained(path, dtype=torch.float32)
        # FSDP1 on CPU works without sync_module_states (that one needs an accelerator): every rank loads the same
        # checkpoint. One unit per decoder layer plus the root (embedding, final norm, LM head).
        policy = get_fsdp_wrap_policy(hf)
        model = FSDP(hf, device_id=torch.device("cpu"), auto_wrap_policy=policy, use_orig_params=False)
        units = [name for name, m in model.named_modules() if isinstance(m, FSDP) and m._handle is not None]
        assert len(units) == hf.config.num_hidden_layers + 1, units
        manager = FSDPVLLMShardingManager(model, FakeLLM(), hf.config)
        streamed, gathered = [], []
        for name, tensor in manager._full_weights():
            streamed.append((name, tensor))  # kept past the unit's reshard: must be a copy, not a view
            gathered.append(_gathered_units(model))
        full = get_fsdp_full_state_dict(model, offload_to_cpu=False, rank0_only=False)
        full = {normalize_weight_name(name): tensor for name, tensor in full.items()}
        if hf.config.tie_word_embeddings:
            del full["lm_head.weight"]
        assert len(streamed) == len(full) and sorted(dict(streamed)) == sorted(full)
        for name, tensor in streamed:
            assert tensor.dtype == full[name].dtype and torch.equal(tensor, full[name]), name
        # exactly one unit gathered at every yield, the one the tensor belongs to; units one after another, each once
        for (name, _), live in zip(streamed, gathered):
            assert len(live) == 1 and name.startswith(normalize_weight_name(live[0])), (name, live)
        runs = [live[0] for i, live in enumerate(gathered) if i == 0 or live != gathered[i - 1]]
        assert runs == units, runs


def test_fsdp1_streams_one_unit_at_a_time_with_the_full_state_dicts_tensors(tmp_path):
    from verl.demo.tiny_model import make_tiny_model_dir

    paths = [
        make_tiny_model_dir(str(tmp_path / "untied")),
        make_tiny_model_dir(str(tmp_path / "tied"), tie_word_embeddings=True),
    ]
    spawn_gloo_ranks(_fsdp1_worker, WORLD, paths)
