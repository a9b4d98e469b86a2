"""The SFT trainer under torchrun on one accelerator (world size 1, NCCL): the loss falls and a checkpoint loads.

Skipped without an accelerator unless ``VERL_GPU_CHECK_DEVICE=cpu`` (then gloo on CPU, fewer steps).
"""

import os
import random
import re
import subprocess
import sys

import pandas as pd
import torch

from verl.utils.device import is_accelerator_available

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
ON_DEVICE = is_accelerator_available()
STEPS = 30 if ON_DEVICE else 10


def test_sft_torchrun_one_rank_nccl(tmp_path):
    from transformers import AutoModelForCausalLM

    from verl.demo.tiny_model import make_tiny_model_dir
    from verl.single_controller.base.worker import WorkerHelper

    model = make_tiny_model_dir(str(tmp_path / "model"), hidden_size=64, num_layers=2, num_heads=4, num_kv_heads=2)
    rng = random.Random(0)
    rows = [
        {"question": f"{a}+{b}=", "answer": f"{a + b}"}
        for a, b in ((rng.randint(0, 9), rng.randint(0, 9)) for _ in range(80))
    ]
    pd.DataFrame(rows[:64]).to_parquet(tmp_path / "train.parquet")
    pd.DataFrame(rows[64:]).to_parquet(tmp_path / "val.parquet")
    ckpt = tmp_path / "ckpt"
    cmd = [
        sys.executable, "-m", "torch.distributed.run", "--nproc_per_node=1", "--master_addr=127.0.0.1",
        f"--master_port={WorkerHelper._get_free_port()}", "-m", "verl.trainer.fsdp_sft_trainer",
        f"data.train_files={tmp_path / 'train.parquet'}", f"data.val_files={tmp_path / 'val.parquet'}",
        "data.max_length=48", "data.train_batch_size=8", "data.micro_batch_size_per_gpu=4",
        f"model.partial_pretrain={model}", f"trainer.default_local_dir={ckpt}", "trainer.logger=[console]",
        f"trainer.total_training_steps={STEPS}", f"trainer.test_freq={STEPS}", f"trainer.save_freq={STEPS}",
        "optim.lr=3e-3", f"hydra.run.dir={tmp_path / 'hydra'}",
    ]  # fmt: skip
    env = dict(os.environ, PYTHONPATH=ROOT, NCCL_DEBUG="INFO", TOKENIZERS_PARALLELISM="false")
    proc = subprocess.run(cmd, cwd=tmp_path, env=env, capture_output=True, text=True, timeout=600)
    output = proc.stdout + proc.stderr
    assert proc.returncode == 0, output[-6000:]
    if ON_DEVICE:
        assert "NCCL INFO" in output, "the process group did not use NCCL"
    losses = [float(x) for x in re.findall(r"train/loss:([0-9.]+)", proc.stdout)]
    assert len(losses) == STEPS, proc.stdout[-2000:]
    assert sum(losses[-3:]) / 3 < 0.8 * sum(losses[:3]) / 3, losses
    saved = ckpt / f"global_step_{STEPS}"
    trained = AutoModelForCausalLM.from_pretrained(str(saved)).state_dict()
    initial = AutoModelForCausalLM.from_pretrained(model).state_dict()
    assert all(not torch.equal(p, initial[n]) for n, p in trained.items())
