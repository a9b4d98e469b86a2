"""Model merger round trips: 2-rank FSDP2 checkpoints -> Hugging Face folders with exactly the trained weights
(causal LM, value model, LoRA merged as peft's merge_and_unload does), and the ``test`` sub-command."""

import os
import subprocess
import sys

import pytest
import torch
import torch.distributed as dist

from tests.gloo_ranks import spawn_gloo_ranks
from verl.demo.tiny_model import make_tiny_model_dir
from verl.model_merger import main
from verl.model_merger.base_model_merger import ModelMergerConfig, generate_config_from_args, parse_args
from verl.model_merger.fsdp_model_merger import merge_shards

WORLD = 2
REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
LORA = {"r": 4, "lora_alpha": 8, "target_modules": ["q_proj", "v_proj"], "init_lora_weights": False}


def _peft_model(base_dir: str):
    from peft import LoraConfig, get_peft_model
    from transformers import AutoModelForCausalLM

    torch.manual_seed(7)  # init_lora_weights=False draws random A and B
    return get_peft_model(AutoModelForCausalLM.from_pretrained(base_dir), LoraConfig(**LORA))


def _train_and_save(model, mesh, tokenizer, out_dir: str, full_path: str, rank: int):
    """One AdamW step on FSDP2, a checkpoint in verl's layout, and rank 0's copy of the full trained weights."""
    from verl.utils.checkpoint.fsdp_checkpoint_manager import FSDPCheckpointManager
    from verl.utils.fsdp_utils import get_fsdp_full_state_dict, wrap_model_for_training

    model = wrap_model_for_training(model, "fsdp2", mesh)
    opt = torch.optim.AdamW([p for p in model.parameters() if p.requires_grad], lr=1e-2)
    ids = torch.randint(0, 200, (2, 8), generator=torch.Generator().manual_seed(rank))
    out = model(input_ids=ids, use_cache=False)
    out.logits.float().pow(2).mean().backward()
    opt.step()
    FSDPCheckpointManager(model, opt, processing_class=tokenizer).save_checkpoint(out_dir)
    full = get_fsdp_full_state_dict(model, offload_to_cpu=True, rank0_only=True)
    if rank == 0:
        torch.save(full, full_path)


def _worker(rank: int, root: str, lm_dir: str, critic_dir: str):
    torch.set_num_threads(1)
    from torch.distributed.device_mesh import init_device_mesh
    from transformers import AutoModelForCausalLM, AutoModelForTokenClassification, AutoTokenizer

    mesh = init_device_mesh("cpu", (WORLD,), mesh_dim_names=("fsdp",))
    tokenizer = AutoTokenizer.from_pretrained(lm_dir)
    lm = AutoModelForCausalLM.from_pretrained(lm_dir)
    _train_and_save(lm, mesh, tokenizer, f"{root}/actor/global_step_1/actor", f"{root}/actor_full.pt", rank)
    critic = AutoModelForTokenClassification.from_pretrained(critic_dir)
    _train_and_save(critic, mesh, tokenizer, f"{root}/critic", f"{root}/critic_full.pt", rank)
    _train_and_save(_peft_model(lm_dir), mesh, tokenizer, f"{root}/lora", f"{root}/lora_full.pt", rank)


@pytest.fixture(scope="module")
def checkpoints(tmp_path_factory):
    """Three 2-rank FSDP2 checkpoints (actor, critic, LoRA actor) and the full weights they hold."""
    root = tmp_path_factory.mktemp("ckpt")
    lm_dir = make_tiny_model_dir(str(root / "lm"), hidden_size=32, intermediate_size=64)
    critic_dir = make_tiny_model_dir(str(root / "critic_init"), head="token_classification", hidden_size=32, seed=1)
    spawn_gloo_ranks(_worker, WORLD, str(root), lm_dir, critic_dir)
    return root


def _merge(local_dir, target, *extra):
    main(["merge", "--backend", "fsdp", "--local_dir", str(local_dir), "--target_dir", str(target), *extra])


def test_merge_causal_lm_has_trained_weights(checkpoints, tmp_path):
    from transformers import AutoModelForCausalLM, AutoTokenizer, GenerationConfig

    trained = torch.load(checkpoints / "actor_full.pt")
    initial = AutoModelForCausalLM.from_pretrained(checkpoints / "lm").state_dict()
    assert any(not torch.equal(trained[k], initial[k]) for k in initial)  # the step changed the weights
    local_dir = checkpoints / "actor" / "global_step_1" / "actor"
    _merge(local_dir, tmp_path / "fp32", "--dtype", "float32")
    merged = AutoModelForCausalLM.from_pretrained(tmp_path / "fp32", dtype="auto")
    assert merged.dtype == torch.float32
    state = merged.state_dict()
    assert set(state) == set(trained)
    for k, v in trained.items():
        assert torch.equal(state[k], v), k
    # The default is verl's bf16 output.
    _merge(local_dir, tmp_path / "bf16")
    merged = AutoModelForCausalLM.from_pretrained(tmp_path / "bf16", dtype="auto")
    assert merged.dtype == torch.bfloat16
    for k, v in merged.state_dict().items():
        assert torch.equal(v, trained[k].bfloat16()), k
    tokenizer = AutoTokenizer.from_pretrained(tmp_path / "bf16")
    assert tokenizer.decode(tokenizer("merge me")["input_ids"]) == "merge me"
    reference = AutoTokenizer.from_pretrained(checkpoints / "lm")
    assert GenerationConfig.from_pretrained(tmp_path / "bf16").eos_token_id == reference.eos_token_id


def test_merge_value_model(checkpoints, tmp_path):
    from transformers import AutoModelForTokenClassification

    trained = torch.load(checkpoints / "critic_full.pt")
    _merge(checkpoints / "critic", tmp_path, "--is-value-model", "--dtype", "float32")
    merged = AutoModelForTokenClassification.from_pretrained(tmp_path, dtype="auto")
    assert merged.score.weight.shape == (1, 32)
    state = merged.state_dict()
    assert set(state) == set(trained)
    for k, v in trained.items():
        assert torch.equal(state[k], v), k


def test_test_subcommand_passes_and_fails(checkpoints, tmp_path):
    local_dir = str(checkpoints / "actor" / "global_step_1" / "actor")
    _merge(local_dir, tmp_path / "ref")
    main(["test", "--backend", "fsdp", "--local_dir", local_dir, "--test_hf_dir", str(tmp_path / "ref")])
    # A reference that differs in one tensor fails, from the command line with a non-zero exit.
    from transformers import AutoModelForCausalLM

    wrong = AutoModelForCausalLM.from_pretrained(tmp_path / "ref", dtype="auto")
    with torch.no_grad():
        wrong.model.layers[1].mlp.up_proj.weight[0, 0] += 1.0
    wrong.save_pretrained(tmp_path / "wrong")
    cmd = [sys.executable, "-m", "verl.model_merger", "test", "--backend", "fsdp", "--local_dir", local_dir]
    result = subprocess.run(
        [*cmd, "--test_hf_dir", str(tmp_path / "wrong")], cwd=REPO, capture_output=True, text=True, timeout=300
    )
    assert result.returncode != 0
    assert "model.layers.1.mlp.up_proj.weight" in result.stderr


def test_lora_merge_equals_peft_merge_and_unload(checkpoints, tmp_path):
    from peft import PeftModel

    trained = torch.load(checkpoints / "lora_full.pt")
    assert any("lora_B" in k for k in trained)
    reference_model = _peft_model(str(checkpoints / "lm"))
    reference_model.load_state_dict(trained)
    reference = reference_model.merge_and_unload().state_dict()
    _merge(checkpoints / "lora", tmp_path, "--dtype", "float32")
    from transformers import AutoModelForCausalLM

    merged = AutoModelForCausalLM.from_pretrained(tmp_path, dtype="auto").state_dict()
    assert set(merged) == set(reference)
    changed = 0
    for k, v in reference.items():
        assert torch.equal(merged[k], v), k
        if k.endswith("q_proj.weight"):
            changed += int(not torch.equal(v, trained[f"base_model.model.{k[:-7]}.base_layer.weight"]))
    assert changed == 2  # both layers' q_proj carry a merged delta
    # The adapter written next to the model reproduces the same weights through peft.
    adapter_dir = tmp_path / "lora_adapter"
    assert sorted(os.listdir(adapter_dir)) == ["adapter_config.json", "adapter_model.safetensors"]
    base = AutoModelForCausalLM.from_pretrained(checkpoints / "lm")
    via_peft = PeftModel.from_pretrained(base, str(adapter_dir)).merge_and_unload().state_dict()
    assert set(via_peft) == set(merged)
    for k, v in via_peft.items():
        assert torch.equal(v, merged[k]), k


def test_merge_shards_two_dim_mesh():
    """A ("ddp", "fsdp") mesh: the replicated ddp dim is dropped, fsdp shards are concatenated in mesh order."""
    from torch.distributed.tensor import DTensor, Replicate, Shard
    from torch.testing._internal.distributed.fake_pg import FakeStore

    dist.init_process_group("fake", store=FakeStore(), rank=0, world_size=4)
    try:
        from torch.distributed.device_mesh import init_device_mesh

        mesh = init_device_mesh("cpu", (2, 2), mesh_dim_names=("ddp", "fsdp"))
        full = torch.arange(30.0).reshape(5, 6)
        rows = [full[:3], full[3:]]  # uneven, as FSDP2 shards a 5-row tensor over 2 ranks
        shards = [
            DTensor.from_local(
                rows[r % 2], mesh, [Replicate(), Shard(0)], run_check=False, shape=full.shape, stride=(6, 1)
            )
            for r in range(4)
        ]
        assert torch.equal(merge_shards("w", shards, 4), full)
        cols = [full[:, :3], full[:, 3:]]
        shards = [
            DTensor.from_local(
                cols[r % 2], mesh, [Replicate(), Shard(1)], run_check=False, shape=full.shape, stride=(6, 1)
            )
            for r in range(4)
        ]
        assert torch.equal(merge_shards("w", shards, 4), full)
    finally:
        dist.destroy_process_group()
    # Plain tensors (a world of one, or unwrapped saves) are concatenated on dim 0.
    assert torch.equal(merge_shards("w", [full[:2], full[2:]], 2), full)


def test_cli_parsing_and_errors(tmp_path):
    args = parse_args(["merge", "--backend", "fsdp", "--local_dir", "ckpt/actor", "--target_dir", str(tmp_path / "o")])
    config = generate_config_from_args(args)
    assert config.hf_model_config_path == os.path.join("ckpt/actor", "huggingface")
    assert config.hf_upload is False and config.dtype == "bfloat16" and os.path.isdir(tmp_path / "o")
    args = parse_args(["merge", "--backend", "fsdp", "--local_dir", "c", "--hf_upload_path", "me/model", "--private"])
    assert generate_config_from_args(args).hf_upload is True
    with pytest.raises(SystemExit):
        parse_args(["test", "--backend", "fsdp", "--local_dir", "c"])  # --test_hf_dir is required
    with pytest.raises(ValueError, match="backend='deepspeed'"):
        ModelMergerConfig(operation="merge", backend="deepspeed")
    with pytest.raises(FileNotFoundError, match="huggingface"):
        _merge(tmp_path, tmp_path / "out")
    with pytest.raises(FileNotFoundError, match="huggingface"):  # not a checkpoint folder (merging: tests/workers)
        main(["merge", "--backend", "megatron", "--local_dir", str(tmp_path), "--target_dir", str(tmp_path / "m")])


def test_missing_fsdp_config(checkpoints, tmp_path):
    import shutil

    local_dir = tmp_path / "actor"
    shutil.copytree(checkpoints / "critic" / "huggingface", local_dir / "huggingface")
    with pytest.raises(FileNotFoundError, match="fsdp_config.json"):
        _merge(local_dir, tmp_path / "out")
    (local_dir / "fsdp_config.json").write_text('{"FSDP_version": 2}')
    with pytest.raises(ValueError, match="world_size"):
        _merge(local_dir, tmp_path / "out")


def test_tied_embeddings_plain_checkpoint(tmp_path):
    """A world-of-one checkpoint of a tied-embedding model merges to the original weights, and ``test`` agrees."""
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from verl.utils.checkpoint.fsdp_checkpoint_manager import FSDPCheckpointManager

    src = make_tiny_model_dir(str(tmp_path / "tied"), hidden_size=32, intermediate_size=64, tie_word_embeddings=True)
    model = AutoModelForCausalLM.from_pretrained(src)
    tokenizer = AutoTokenizer.from_pretrained(src)
    FSDPCheckpointManager(
        model, None, processing_class=tokenizer, checkpoint_config={"save_contents": ["model"]}
    ).save_checkpoint(str(tmp_path / "ckpt"))
    _merge(tmp_path / "ckpt", tmp_path / "out", "--dtype", "float32")
    merged = AutoModelForCausalLM.from_pretrained(tmp_path / "out")
    assert merged.lm_head.weight.data_ptr() == merged.model.embed_tokens.weight.data_ptr()
    for k, v in model.state_dict().items():
        assert torch.equal(merged.state_dict()[k], v), k
    main(
        ["test", "--backend", "fsdp", "--local_dir", str(tmp_path / "ckpt"), "--test_hf_dir", src, "--dtype", "float32"]
    )
