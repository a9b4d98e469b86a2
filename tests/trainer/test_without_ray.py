"""The trainer, the workers and the SFT trainer load and run where Ray is not installed (the GPU check's machine).

Each run is a subprocess whose ``sitecustomize`` makes ``import ray`` fail as it would without the package. Under it:
the trainer, main_ppo's build functions, the FSDP workers and the SFT trainer import; one GRPO step runs through
the in-process worker group; the SFT entry point trains two steps under torchrun. Ray never enters ``sys.modules``.
"""

import os
import random
import subprocess
import sys
import textwrap

import pandas as pd
import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

BLOCKER = '''
"""Make ``import ray`` (and its submodules) fail as if Ray were not installed."""
import sys


class _NoRay:
    def find_spec(self, name, path=None, target=None):
        if name == "ray" or name.startswith("ray."):
            raise ModuleNotFoundError(f"No module named {name!r} (blocked by the test)", name=name)
        return None


sys.meta_path.insert(0, _NoRay())
'''

GRPO_STEP = """
import sys

try:
    import ray  # noqa: F401
except ModuleNotFoundError:
    pass
else:
    raise AssertionError("the blocker did not block ray")

import verl.trainer.fsdp_sft_trainer
import verl.workers.fsdp_workers
from verl.trainer.ppo.ray_trainer import RayPPOTrainer
from verl.trainer.main_ppo import build_trainer, prepare_config
from verl.single_controller.inprocess import InProcessWorkerGroup
from tests.trainer.ppo_e2e_utils import base_overrides, compose_config, make_workspace, write_reward_fn
import pathlib

root = pathlib.Path(sys.argv[1])
ws = make_workspace(root)
overrides = base_overrides(ws, "grpo", steps=1) + [
    "trainer.n_gpus_per_node=1", "trainer.resume_mode=disable", "trainer.run_report=False",
    f"custom_reward_function.path={write_reward_fn(root)}",
]
config = compose_config(overrides)
prepare_config(config)
trainer = build_trainer(config, ray_worker_group_cls=InProcessWorkerGroup)
assert isinstance(trainer, RayPPOTrainer)
trainer.init_workers()
trainer.fit()
assert trainer.global_steps >= 1
assert not [m for m in sys.modules if m == "ray" or m.startswith("ray.")], "ray was imported"
print("GRPO_STEP_DONE")
"""


def _env(site_dir) -> dict:
    env = dict(os.environ, TOKENIZERS_PARALLELISM="false", OMP_NUM_THREADS="1", VERL_LOGGING_LEVEL="WARNING")
    env["PYTHONPATH"] = os.pathsep.join([str(site_dir), ROOT])
    return env


@pytest.fixture(scope="module")
def site_dir(tmp_path_factory):
    path = tmp_path_factory.mktemp("no_ray_site")
    (path / "sitecustomize.py").write_text(textwrap.dedent(BLOCKER))
    return path


@pytest.mark.slow
def test_grpo_step_in_process_without_ray(site_dir, tmp_path):
    proc = subprocess.run(
        [sys.executable, "-c", GRPO_STEP, str(tmp_path)],
        cwd=ROOT, env=_env(site_dir), capture_output=True, text=True, timeout=600,
    )  # fmt: skip
    assert proc.returncode == 0 and "GRPO_STEP_DONE" in proc.stdout, proc.stdout[-3000:] + proc.stderr[-5000:]


@pytest.mark.slow
def test_sft_torchrun_without_ray(site_dir, tmp_path):
    from verl.demo.tiny_model import make_tiny_model_dir
    from verl.single_controller.base.worker import WorkerHelper

    model = make_tiny_model_dir(str(tmp_path / "model"), hidden_size=32, num_layers=1, num_heads=2, num_kv_heads=1)
    rng = random.Random(0)
    rows = [{"question": f"{a}+{b}=", "answer": f"{a + b}"} for a, b in ((rng.randint(0, 9), 1) for _ in range(16))]
    pd.DataFrame(rows).to_parquet(tmp_path / "train.parquet")
    cmd = [
        sys.executable, "-m", "torch.distributed.run", "--nproc_per_node=1", "--master_addr=127.0.0.1",
        f"--master_port={WorkerHelper._get_free_port()}", "-m", "verl.trainer.fsdp_sft_trainer",
        f"data.train_files={tmp_path / 'train.parquet'}", "data.val_files=null", "data.max_length=32",
        "data.train_batch_size=4", "data.micro_batch_size_per_gpu=2", f"model.partial_pretrain={model}",
        "model.enable_gradient_checkpointing=False", f"trainer.default_local_dir={tmp_path / 'ckpt'}",
        "trainer.logger=[console]", "trainer.total_training_steps=2", "trainer.save_freq=-1",
        f"hydra.run.dir={tmp_path / 'hydra'}",
    ]  # fmt: skip
    proc = subprocess.run(cmd, cwd=tmp_path, env=_env(site_dir), capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-5000:]
    assert proc.stdout.count("train/loss:") == 2, proc.stdout[-2000:]
