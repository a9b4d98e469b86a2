"""FSDP SFT trainer: config checks, a torchrun end-to-end run on 2 CPU ranks (loss falls, the checkpoint loads), and
2-rank equivalences (packed == padded == Ulysses SP=2 loss and gradients), LoRA training with merged/adapter saves."""

import os
import random
import re
import subprocess
import sys

import pandas as pd
import pytest
import torch
import torch.distributed as dist
from omegaconf import OmegaConf

from tests.gloo_ranks import free_port, spawn_gloo_ranks
from verl.trainer.config.sft import SFTConfig
from verl.trainer.fsdp_sft_trainer import (
    create_sft_dataset,
    extract_step,
    lora_adapter_state_dict,
    merge_lora_state_dict,
    run_sft,
    validate_sft_config,
)

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
YAML = os.path.join(ROOT, "verl", "trainer", "config", "sft_trainer.yaml")
WORLD = 2


@pytest.fixture(scope="module")
def workdir(tmp_path_factory):
    """A tiny Qwen2 model dir and addition-problem parquet files (48 train / 16 val rows)."""
    from verl.demo.tiny_model import make_tiny_model_dir

    root = tmp_path_factory.mktemp("sft")
    make_tiny_model_dir(str(root / "model"), hidden_size=64, num_layers=2, num_heads=4, num_kv_heads=2)
    rng = random.Random(0)
    rows = []
    for _ in range(64):
        a, b = rng.randint(0, 9), rng.randint(0, 9)
        rows.append({"question": f"{a}+{b}=", "answer": f"{a + b}"})
    pd.DataFrame(rows[:48]).to_parquet(root / "train.parquet")
    pd.DataFrame(rows[48:]).to_parquet(root / "val.parquet")
    return root


def _config(workdir, **overrides):
    cfg = OmegaConf.load(YAML)
    base = {
        "data.train_files": str(workdir / "train.parquet"),
        "data.val_files": str(workdir / "val.parquet"),
        "data.max_length": 48,
        "data.train_batch_size": 8,
        "data.micro_batch_size_per_gpu": 2,
        "model.partial_pretrain": str(workdir / "model"),
        "model.enable_gradient_checkpointing": False,
        "trainer.logger": ["console"],
        "trainer.default_local_dir": str(workdir / "ckpt"),
    }
    base.update(overrides)
    cfg.merge_with(OmegaConf.from_dotlist([f"{k}={v}" for k, v in base.items()]))
    return cfg


# ------------------------------------------------------------------------------------------------------------
# no processes
# ------------------------------------------------------------------------------------------------------------
@pytest.mark.parametrize(
    "overrides, world, error, pattern",
    [
        ({"model.strategy": "ddp"}, 2, ValueError, "model.strategy='ddp'"),
        ({"data.micro_batch_size_per_gpu": 3}, 2, ValueError, "micro_batch_size_per_gpu=3"),
        ({"data.train_batch_size": 7}, 2, ValueError, "train_batch_size=7"),
        ({"ulysses_sequence_parallel_size": 2}, 2, ValueError, "use_remove_padding"),
        ({"ulysses_sequence_parallel_size": 3, "use_remove_padding": True}, 2, ValueError, "divisor"),
        ({"optim.lr_scheduler": "linear"}, 1, ValueError, "optim.lr_scheduler"),
        ({"data.chat_template": "x"}, 1, ValueError, "data.chat_template"),
        ({"data.train_files": "/nonexistent/train.parquet"}, 1, FileNotFoundError, "data.train_files"),
        ({"data.val_files": "/nonexistent/val.parquet"}, 1, FileNotFoundError, "data.val_files"),
        ({"data.truncation": "middle"}, 1, ValueError, "data.truncation='middle'"),
        ({"model.lora_rank": -2}, 1, ValueError, "model.lora_rank=-2"),
        ({"trainer.total_epochs": 0}, 1, ValueError, "trainer.total_epochs=0"),
        ({"data.max_length": "long"}, 1, TypeError, "data.max_length='long'"),
    ],
)
def test_validate_sft_config_names_the_bad_key(workdir, overrides, world, error, pattern):
    validate_sft_config(_config(workdir), world)  # the base config is valid
    with pytest.raises(error, match=re.escape(pattern)):
        validate_sft_config(_config(workdir, **overrides), world)


def test_validate_sft_config_returns_the_typed_config(workdir):
    cfg = _config(workdir)
    cfg.model.my_flag = 1  # a `+model.my_flag=1` override: kept as an extra key
    typed = validate_sft_config(cfg, 2)
    assert isinstance(typed, SFTConfig) and typed.model.my_flag == 1
    assert typed.data.train_batch_size == 8 and typed.optim.betas == [0.9, 0.95]
    assert validate_sft_config(typed, 2) is typed  # already typed: not built again


def test_run_sft_rejects_missing_data_before_loading_the_model(workdir, monkeypatch):
    monkeypatch.setenv("WORLD_SIZE", "1")
    cfg = _config(workdir, **{"data.train_files": "/nonexistent/x.parquet", "model.partial_pretrain": "/no/model"})
    with pytest.raises(FileNotFoundError, match="data.train_files"):
        run_sft(cfg)
    assert not dist.is_initialized()


def test_create_sft_dataset_picks_single_or_multi_turn(workdir, tmp_path):
    from transformers import AutoTokenizer

    from verl.utils.dataset import MultiTurnSFTDataset, SFTDataset

    tokenizer = AutoTokenizer.from_pretrained(str(workdir / "model"))
    cfg = _config(workdir)
    single = create_sft_dataset(cfg.data.train_files, cfg.data, tokenizer)
    assert isinstance(single, SFTDataset) and len(single) == 48
    pd.DataFrame(
        {"messages": [[{"role": "user", "content": "1+1="}, {"role": "assistant", "content": "2"}]] * 3}
    ).to_parquet(tmp_path / "mt.parquet")
    cfg.data.multiturn.enable = True
    multi = create_sft_dataset(str(tmp_path / "mt.parquet"), cfg.data, tokenizer)
    assert isinstance(multi, MultiTurnSFTDataset) and len(multi) == 3


def test_extract_step():
    assert extract_step("/ckpt/global_step_120") == 120
    assert extract_step("/ckpt/global_step_7/") == 7
    assert extract_step("/ckpt/latest") is None


def test_merge_lora_state_dict_by_hand():
    a = torch.tensor([[1.0, 2.0]])  # (r=1, in=2)
    b = torch.tensor([[1.0], [3.0]])  # (out=2, r=1)
    w = torch.eye(2)
    state = {
        "base_model.model.layer.q.base_layer.weight": w,
        "base_model.model.layer.q.base_layer.bias": torch.ones(2),
        "base_model.model.layer.q.lora_A.default.weight": a,
        "base_model.model.layer.q.lora_B.default.weight": b,
        "base_model.model.norm.weight": torch.full((2,), 5.0),
    }
    merged = merge_lora_state_dict(state, scaling=0.5)
    assert set(merged) == {"layer.q.weight", "layer.q.bias", "norm.weight"}
    torch.testing.assert_close(merged["layer.q.weight"], torch.tensor([[1.5, 1.0], [1.5, 4.0]]))
    assert set(lora_adapter_state_dict(state)) == {
        "base_model.model.layer.q.lora_A.weight",
        "base_model.model.layer.q.lora_B.weight",
    }


# ------------------------------------------------------------------------------------------------------------
# torchrun end to end
# ------------------------------------------------------------------------------------------------------------
def test_torchrun_two_ranks_loss_falls_and_checkpoint_loads(workdir, tmp_path):
    from transformers import AutoModelForCausalLM, AutoTokenizer

    ckpt = tmp_path / "ckpt"
    cmd = [
        sys.executable,
        "-m",
        "torch.distributed.run",
        "--nproc_per_node=2",
        "--master_addr=127.0.0.1",
        f"--master_port={free_port()}",
        "-m",
        "verl.trainer.fsdp_sft_trainer",
        f"data.train_files={workdir / 'train.parquet'}",
        f"data.val_files={workdir / 'val.parquet'}",
        "data.max_length=48",
        "data.train_batch_size=8",
        "data.micro_batch_size_per_gpu=2",
        f"model.partial_pretrain={workdir / 'model'}",
        f"trainer.default_local_dir={ckpt}",
        "trainer.logger=[console]",
        "trainer.total_training_steps=20",
        "trainer.test_freq=10",
        "trainer.save_freq=10",
        "trainer.max_ckpt_to_keep=1",
        "optim.lr=3e-3",
        f"hydra.run.dir={tmp_path / 'hydra'}",
    ]
    env = dict(os.environ, OMP_NUM_THREADS="1", PYTHONPATH=ROOT)
    proc = subprocess.run(cmd, cwd=tmp_path, env=env, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    losses = [float(x) for x in re.findall(r"train/loss:([0-9.]+)", proc.stdout)]
    val_losses = [float(x) for x in re.findall(r"val/loss:([0-9.]+)", proc.stdout)]
    assert len(losses) == 20 and len(val_losses) == 2, proc.stdout[-2000:]
    assert sum(losses[-3:]) / 3 < 0.7 * sum(losses[:3]) / 3, losses
    assert val_losses[1] < val_losses[0]
    # save_freq=10 wrote step 10 and 20; max_ckpt_to_keep=1 removed step 10
    assert sorted(os.listdir(ckpt)) == ["global_step_20"]
    model = AutoModelForCausalLM.from_pretrained(str(ckpt / "global_step_20"))
    initial = AutoModelForCausalLM.from_pretrained(str(workdir / "model"))
    AutoTokenizer.from_pretrained(str(ckpt / "global_step_20"))
    moved = [not torch.equal(p, initial.state_dict()[n]) for n, p in model.state_dict().items()]
    assert all(moved)


# ------------------------------------------------------------------------------------------------------------
# 2-rank equivalences and LoRA (one spawn)
# ------------------------------------------------------------------------------------------------------------
def _build_trainer(workdir, dp: int, sp: int, config=None, **overrides):
    from torch.distributed.device_mesh import init_device_mesh
    from transformers import AutoTokenizer

    from verl.trainer.fsdp_sft_trainer import FSDPSFTTrainer

    cfg = config if config is not None else _config(workdir, ulysses_sequence_parallel_size=sp, **overrides)
    tokenizer = AutoTokenizer.from_pretrained(str(workdir / "model"))
    train = create_sft_dataset(cfg.data.train_files, cfg.data, tokenizer)
    val = create_sft_dataset(cfg.data.val_files, cfg.data, tokenizer)
    mesh = init_device_mesh("cpu", (WORLD,), mesh_dim_names=("fsdp",))
    ulysses_mesh = init_device_mesh("cpu", (dp, sp), mesh_dim_names=("dp", "sp"))
    return FSDPSFTTrainer(cfg, mesh, ulysses_mesh, tokenizer, train, val)


def _loss_and_grads(trainer, batch):
    trainer.fsdp_model.train()  # from_pretrained gives eval mode on rank 0 only; checkpointing needs both alike
    trainer.fsdp_model.zero_grad()
    loss = trainer._compute_loss_and_backward(batch)
    grads = {}
    for name, p in trainer.fsdp_model.named_parameters():
        grads[name] = p.grad.full_tensor() if hasattr(p.grad, "full_tensor") else p.grad.clone()
    return loss.item(), grads


def _fixed_batch(workdir):
    from transformers import AutoTokenizer

    from verl.utils.dataset import SFTDataset

    tokenizer = AutoTokenizer.from_pretrained(str(workdir / "model"))
    ds = SFTDataset(
        str(workdir / "train.parquet"),
        tokenizer,
        {"prompt_key": "question", "response_key": "answer", "max_length": 48},
    )
    rows = [ds[i] for i in range(4)]
    return {k: torch.stack([r[k] for r in rows]) for k in rows[0]}


def _worker(rank: int, workdir, out_path: str):
    torch.set_num_threads(1)
    batch = _fixed_batch(workdir)  # the same rows on both ranks
    out = {}
    out["padded"] = _loss_and_grads(_build_trainer(workdir, dp=2, sp=1), batch)
    given = SFTConfig.from_config(_config(workdir, use_remove_padding=True))
    rmpad = _build_trainer(workdir, dp=2, sp=1, config=given)
    out["rmpad"] = _loss_and_grads(rmpad, batch)
    rows = len(next(iter(rmpad.train_dataloader))["input_ids"])
    out["rmpad_bsz"] = (given.data.train_batch_size, rmpad.config.data.train_batch_size, rows)
    out["fused_adamw"] = rmpad.optimizer.defaults.get("fused")  # CPU: torch's fused kernel, as the RL engine's
    sp_trainer = _build_trainer(
        workdir, dp=1, sp=2, use_remove_padding=True, **{"model.enable_gradient_checkpointing": True}
    )
    out["sp2"] = _loss_and_grads(sp_trainer, batch)

    lora_dir = os.path.join(os.path.dirname(out_path), "lora_ckpt")
    lora = _build_trainer(
        workdir,
        dp=2,
        sp=1,
        use_remove_padding=True,
        **{
            "model.lora_rank": 8,
            "model.lora_alpha": 16,
            "optim.lr": 1e-2,
            "trainer.total_training_steps": 6,
            "trainer.default_local_dir": lora_dir,
        },
    )
    before = lora.validate()
    lora.fit()
    out["lora_val"] = (before, lora.validate())
    out["lora_ckpt"] = os.path.join(lora_dir, "global_step_6")
    if rank == 0:
        torch.save(out, out_path)


def _reference_loss_and_grads(workdir, batch):
    """Single-process padded SFT loss, written out from the definition (mask shifted by one)."""
    from transformers import AutoModelForCausalLM

    model = AutoModelForCausalLM.from_pretrained(str(workdir / "model"))
    logits = model(
        input_ids=batch["input_ids"], attention_mask=batch["attention_mask"], position_ids=batch["position_ids"]
    ).logits
    ce = torch.nn.functional.cross_entropy(
        logits[:, :-1].reshape(-1, logits.shape[-1]), batch["input_ids"][:, 1:].reshape(-1), reduction="none"
    )
    mask = batch["loss_mask"][:, :-1].reshape(-1).float()
    loss = (ce * mask).sum() / mask.sum()
    loss.backward()
    return loss.item(), {n: p.grad for n, p in model.named_parameters()}


def test_two_ranks_padded_rmpad_sp2_equal_and_lora_trains(workdir, tmp_path):
    from peft import PeftModel
    from transformers import AutoModelForCausalLM

    out_path = str(tmp_path / "out.pt")
    spawn_gloo_ranks(_worker, WORLD, workdir, out_path)
    got = torch.load(out_path)
    batch = _fixed_batch(workdir)
    ref_loss, ref_grads = _reference_loss_and_grads(workdir, batch)
    for mode in ("padded", "rmpad", "sp2"):
        loss, grads = got[mode]
        assert loss == pytest.approx(ref_loss, rel=1e-5), mode
        for name, grad in ref_grads.items():
            torch.testing.assert_close(grads[name], grad, rtol=1e-4, atol=1e-6, msg=f"{mode}: {name}")

    # an SFTConfig passed in is not changed: the trainer's copy holds the per-rank batch size (8 / dp 2)
    assert got["rmpad_bsz"] == (8, 4, 4)
    assert got["fused_adamw"] is True

    before, after = got["lora_val"]
    assert after < before
    ckpt = got["lora_ckpt"]
    merged = AutoModelForCausalLM.from_pretrained(ckpt)
    base = AutoModelForCausalLM.from_pretrained(str(workdir / "model"))
    adapted = PeftModel.from_pretrained(base, os.path.join(ckpt, "lora_adapter")).merge_and_unload()
    for name, value in adapted.state_dict().items():
        torch.testing.assert_close(merged.state_dict()[name], value, rtol=1e-5, atol=1e-6, msg=name)
    with torch.no_grad():
        ids = batch["input_ids"][:1, :20]
        torch.testing.assert_close(merged(input_ids=ids).logits, adapted(input_ids=ids).logits, rtol=1e-4, atol=1e-5)
    changed = any(
        not torch.equal(v, AutoModelForCausalLM.from_pretrained(str(workdir / "model")).state_dict()[k])
        for k, v in merged.state_dict().items()
    )
    assert changed
