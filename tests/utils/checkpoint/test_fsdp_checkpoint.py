"""FSDPCheckpointManager: 2-rank FSDP2 (gloo) save -> load into a fresh model restores params, optimizer, scheduler
and RNG exactly; rotation; save/load_contents; hf_model; and a plain (unsharded) module."""

import json
import os
import random

import numpy as np
import pytest
import torch
import torch.distributed as dist

from tests.gloo_ranks import spawn_gloo_ranks
from verl.demo.tiny_model import make_tiny_model_dir
from verl.utils.checkpoint.fsdp_checkpoint_manager import FSDPCheckpointManager

WORLD = 2


def _batch(seed: int, vocab: int = 200):
    g = torch.Generator().manual_seed(seed)
    return torch.randint(0, vocab, (2, 10), generator=g)


def _build(model_dir: str, seed: int, mesh=None):
    """Model (from the saved weights for seed 0, random otherwise), AdamW and a decaying LambdaLR."""
    from transformers import AutoConfig, AutoModelForCausalLM

    if seed == 0:
        model = AutoModelForCausalLM.from_pretrained(model_dir)
    else:
        torch.manual_seed(seed)
        model = AutoModelForCausalLM.from_config(AutoConfig.from_pretrained(model_dir))
    if mesh is not None:
        from verl.utils.fsdp_utils import wrap_model_for_training

        model = wrap_model_for_training(model, "fsdp2", mesh)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-2)
    sched = torch.optim.lr_scheduler.LambdaLR(opt, lambda s: 1.0 / (s + 1))
    return model, opt, sched


def _step(model, opt, sched, ids):
    rank = dist.get_rank() if dist.is_initialized() else 0
    local = ids.chunk(WORLD)[rank] if dist.is_initialized() else ids
    model(input_ids=local, labels=local, use_cache=False).loss.backward()
    opt.step()
    opt.zero_grad()
    sched.step()


def _local(t):
    return t.to_local() if hasattr(t, "to_local") else t


def _params(model) -> dict:
    return {k: _local(v).detach().clone() for k, v in model.state_dict().items()}


def _assert_same(a: dict, b: dict):
    assert a.keys() == b.keys()
    for k in a:
        assert torch.equal(a[k], b[k]), k


def _optim_states(opt) -> list:
    return [{k: _local(v).clone() for k, v in s.items()} for s in opt.state_dict()["state"].values()]


def _draws():
    return torch.rand(4), np.random.rand(3), random.random()


def _worker(rank: int, root: str, model_dir: str):
    torch.set_num_threads(1)
    from torch.distributed.device_mesh import init_device_mesh
    from transformers import AutoModelForCausalLM, AutoTokenizer

    mesh = init_device_mesh("cpu", (WORLD,), mesh_dim_names=("fsdp",))
    tokenizer = AutoTokenizer.from_pretrained(model_dir)
    model, opt, sched = _build(model_dir, 0, mesh)
    _step(model, opt, sched, _batch(0))
    manager = FSDPCheckpointManager(model, opt, sched, processing_class=tokenizer)
    path1 = os.path.join(root, "global_step_1", "actor")
    manager.save_checkpoint(path1, global_step=1)
    after_save = _draws()
    saved_params, saved_optim = _params(model), _optim_states(opt)
    _step(model, opt, sched, _batch(1))
    continued = _params(model)

    # Layout: per-rank shards, fsdp_config.json and huggingface/ with config, generation config, tokenizer.
    names = set(os.listdir(path1))
    for kind in ("model", "optim", "extra_state"):
        assert f"{kind}_world_size_2_rank_{rank}.pt" in names
    with open(os.path.join(path1, "fsdp_config.json")) as f:
        assert json.load(f) == {"FSDP_version": 2, "world_size": 2}
    hf = set(os.listdir(os.path.join(path1, "huggingface")))
    assert {"config.json", "generation_config.json", "tokenizer.json", "tokenizer_config.json"} <= hf
    assert not any(n.endswith(".safetensors") for n in hf)  # no hf_model requested
    assert not any(n.endswith(".tmp") for n in names)

    # A fresh, differently initialised model with scrambled RNG gets everything back.
    fresh, fresh_opt, fresh_sched = _build(model_dir, 1, mesh)
    assert not torch.equal(_params(fresh)["lm_head.weight"], saved_params["lm_head.weight"])
    torch.manual_seed(1234)
    np.random.seed(1234)
    random.seed(1234)
    FSDPCheckpointManager(fresh, fresh_opt, fresh_sched, processing_class=tokenizer).load_checkpoint(path1)
    after_load = _draws()
    assert torch.equal(after_load[0], after_save[0])
    assert np.array_equal(after_load[1], after_save[1]) and after_load[2] == after_save[2]
    _assert_same(_params(fresh), saved_params)
    loaded_optim = _optim_states(fresh_opt)
    assert len(loaded_optim) == len(saved_optim) > 0
    for got, want in zip(loaded_optim, saved_optim, strict=True):
        _assert_same(got, want)
    assert fresh_sched.last_epoch == 1 and fresh_sched.get_last_lr() == [1e-2 / 2]
    # Training on continues exactly as the original did.
    _step(fresh, fresh_opt, fresh_sched, _batch(1))
    _assert_same(_params(fresh), continued)

    # Rotation: with max_ckpt_to_keep=2, saving step 3 deletes step 1's actor folder.
    manager.save_checkpoint(os.path.join(root, "global_step_2", "actor"), global_step=2, max_ckpt_to_keep=2)
    assert os.path.isdir(path1)
    dist.barrier()  # rank 0 deletes path1 early in the next save: every rank must have looked at it first
    manager.save_checkpoint(os.path.join(root, "global_step_3", "actor"), global_step=3, max_ckpt_to_keep=2)
    dist.barrier()
    assert not os.path.exists(path1)
    if rank == 0:  # only rank 0 deletes, so only its list is trimmed
        steps = [os.path.basename(os.path.dirname(p)) for p in manager.previous_saved_paths]
        assert steps == ["global_step_2", "global_step_3"]

    # save_contents=['model', 'hf_model']: no optimizer/extra files; full weights under huggingface/.
    only_model = os.path.join(root, "model_only")
    cfg = {"save_contents": ["model", "hf_model"], "load_contents": ["model"]}
    FSDPCheckpointManager(model, opt, sched, processing_class=tokenizer, checkpoint_config=cfg).save_checkpoint(
        only_model
    )
    names = set(os.listdir(only_model))
    assert f"model_world_size_2_rank_{rank}.pt" in names
    assert not any(n.startswith(("optim_", "extra_state_")) for n in names)
    full = {k: v.full_tensor() for k, v in model.state_dict().items()}
    if rank == 0:
        hf_model = AutoModelForCausalLM.from_pretrained(os.path.join(only_model, "huggingface"), dtype="auto")
        assert hf_model.dtype == torch.bfloat16
        for k, v in hf_model.state_dict().items():
            assert torch.equal(v, full[k].bfloat16()), k
    other, other_opt, other_sched = _build(model_dir, 2, mesh)
    FSDPCheckpointManager(
        other, other_opt, other_sched, processing_class=tokenizer, checkpoint_config=cfg
    ).load_checkpoint(only_model)
    _assert_same(_params(other), _params(model))
    assert other_opt.state_dict()["state"] == {} and other_sched.last_epoch == 0
    # Asking for the optimizer from a model-only checkpoint names the missing file.
    with pytest.raises(FileNotFoundError, match="optim_world_size_2"):
        FSDPCheckpointManager(other, other_opt, other_sched, processing_class=tokenizer).load_checkpoint(only_model)


@pytest.fixture(scope="module")
def model_dir(tmp_path_factory):
    return make_tiny_model_dir(str(tmp_path_factory.mktemp("tiny")), hidden_size=32, intermediate_size=64)


def test_fsdp2_two_rank_save_load_roundtrip(tmp_path, model_dir):
    spawn_gloo_ranks(_worker, WORLD, str(tmp_path), model_dir)
    # The 2-rank checkpoint cannot be loaded by a world of 1: the error names the saved world size.
    model, opt, sched = _build(model_dir, 3)
    manager = FSDPCheckpointManager(model, opt, sched, processing_class=None, tokenizer=None)
    with pytest.raises(FileNotFoundError, match="world_size=2"):
        manager.load_checkpoint(str(tmp_path / "global_step_3" / "actor"))


def test_plain_module_roundtrip_and_contents(tmp_path, model_dir):
    model, opt, sched = _build(model_dir, 0)
    _step(model, opt, sched, _batch(0))
    cfg = {"contents": ["model", "optimizer", "extra"]}  # v0.4.1 spelling: one list for both directions
    manager = FSDPCheckpointManager(model, opt, sched, processing_class=None, tokenizer=None, checkpoint_config=cfg)
    assert manager.checkpoint_save_contents == manager.checkpoint_load_contents == ["model", "optimizer", "extra"]
    manager.save_checkpoint(str(tmp_path / "ckpt"))
    assert sorted(os.listdir(tmp_path / "ckpt")) == [
        "extra_state_world_size_1_rank_0.pt",
        "fsdp_config.json",
        "huggingface",
        "model_world_size_1_rank_0.pt",
        "optim_world_size_1_rank_0.pt",
    ]
    assert json.loads((tmp_path / "ckpt" / "fsdp_config.json").read_text()) == {"FSDP_version": 0, "world_size": 1}
    fresh, fresh_opt, fresh_sched = _build(model_dir, 5)
    FSDPCheckpointManager(fresh, fresh_opt, fresh_sched, processing_class=None, tokenizer=None).load_checkpoint(
        str(tmp_path / "ckpt")
    )
    _assert_same(_params(fresh), _params(model))
    _step(model, opt, sched, _batch(1))
    _step(fresh, fresh_opt, fresh_sched, _batch(1))
    _assert_same(_params(fresh), _params(model))
    # None paths are no-ops; bad contents are named.
    manager.save_checkpoint(None)
    manager.load_checkpoint(None)
    with pytest.raises(ValueError, match="'weights'"):
        FSDPCheckpointManager(
            model, opt, processing_class=None, tokenizer=None, checkpoint_config={"save_contents": ["weights"]}
        )
    with pytest.raises(AssertionError, match="processing_class"):
        FSDPCheckpointManager(model, opt)
    with pytest.raises(AssertionError, match="no optimizer"):
        FSDPCheckpointManager(model, None, processing_class=None, tokenizer=None).save_checkpoint(str(tmp_path / "x"))


def test_peft_model_saves_adapter_and_merged_hf_model(tmp_path, model_dir):
    from peft import LoraConfig, get_peft_model
    from safetensors.torch import load_file
    from transformers import AutoModelForCausalLM

    torch.manual_seed(3)
    peft_model = get_peft_model(
        AutoModelForCausalLM.from_pretrained(model_dir),
        LoraConfig(r=2, lora_alpha=4, target_modules=["q_proj"], init_lora_weights=False),
    )
    cfg = {"save_contents": ["model", "hf_model"]}
    manager = FSDPCheckpointManager(peft_model, None, processing_class=None, tokenizer=None, checkpoint_config=cfg)
    manager.save_checkpoint(str(tmp_path))
    adapter = load_file(str(tmp_path / "lora_adapter" / "adapter_model.safetensors"))
    assert sorted(adapter) == [
        f"base_model.model.model.layers.{i}.self_attn.q_proj.lora_{ab}.weight" for i in (0, 1) for ab in "AB"
    ]
    config = json.loads((tmp_path / "lora_adapter" / "adapter_config.json").read_text())
    assert config["r"] == 2 and config["lora_alpha"] == 4
    # huggingface/ holds a plain model with the LoRA deltas merged (bf16), as peft's merge_and_unload gives.
    expected = peft_model.merge_and_unload().state_dict()
    saved = AutoModelForCausalLM.from_pretrained(tmp_path / "huggingface", dtype="auto").state_dict()
    assert set(saved) == set(expected)
    for k, v in expected.items():
        assert torch.equal(saved[k], v.bfloat16()), k
