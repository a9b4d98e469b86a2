"""One actor worker's steps in a fresh process, for the GPU checks (``*_on_gpu.py``) and their CPU references.

``python -m tests.workers.gpu_actor_steps --model DIR --out FILE [...]`` builds an ``ActorRolloutRefWorker`` (role
``actor``, world size 1) from the ``ppo_trainer`` config, then:

* ``--mode step``: log-probs, one PPO update, log-probs again; with ``--offload`` the parameters and optimizer state
  live in host memory between calls, and where they were is recorded;
* ``--mode save``: one update, save a checkpoint to ``--ckpt``, then a second update;
* ``--mode resume``: load ``--ckpt`` (unless ``--no-load``), then the second update.

``--liger`` builds the actor with Liger's kernels (``actor_rollout_ref.model.use_liger=True``).

Each run is its own process so that a CPU reference (``CUDA_VISIBLE_DEVICES=""``) and a device run, FSDP1 and FSDP2,
never share a process group. The results (CPU tensors and floats) are written with ``torch.save`` to ``--out``.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys

import torch

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

PROMPT_LEN, RESPONSE_LEN, BATCH = 12, 10, 8


def rollout_batch(vocab: int, seed: int) -> DataProto:  # noqa: F821 (imported lazily below)
    """A left-padded prompt / right-padded response batch in verl's rollout layout, with advantages."""
    from verl import DataProto
    from verl.utils.model import compute_position_id_with_mask

    g = torch.Generator().manual_seed(seed)
    total = PROMPT_LEN + RESPONSE_LEN
    prompt_lens = torch.randint(2, PROMPT_LEN + 1, (BATCH,), generator=g)
    response_lens = torch.randint(1, RESPONSE_LEN + 1, (BATCH,), generator=g)
    mask = torch.zeros(BATCH, total, dtype=torch.long)
    for i in range(BATCH):
        mask[i, PROMPT_LEN - prompt_lens[i] : PROMPT_LEN + response_lens[i]] = 1
    input_ids = torch.randint(3, vocab, (BATCH, total), generator=g) * mask
    responses = input_ids[:, PROMPT_LEN:]
    batch = {
        "input_ids": input_ids,
        "attention_mask": mask,
        "position_ids": compute_position_id_with_mask(mask),
        "responses": responses,
        "response_mask": mask[:, PROMPT_LEN:],
        "advantages": torch.randn(BATCH, RESPONSE_LEN, generator=g),
    }
    return DataProto.from_dict(tensors=batch, meta_info={"temperature": 1.0})


def worker_config(args):
    """The ``actor_rollout_ref`` section for a one-process actor on the tiny model."""
    from tests.trainer.ppo_e2e_utils import compose_config

    offload = str(bool(args.offload))
    overrides = [
        f"actor_rollout_ref.model.path={args.model}",
        "actor_rollout_ref.model.use_remove_padding=True",
        f"actor_rollout_ref.actor.strategy={args.strategy}",
        f"actor_rollout_ref.actor.optim.lr={args.lr}",
        "actor_rollout_ref.actor.optim.total_training_steps=10",
        f"actor_rollout_ref.actor.ppo_mini_batch_size={BATCH}",
        "actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu=4",
        "actor_rollout_ref.actor.use_kl_loss=False",
        "actor_rollout_ref.actor.entropy_coeff=0",
        "actor_rollout_ref.actor.grad_clip=1e6",
        f"actor_rollout_ref.actor.fsdp_config.param_offload={offload}",
        f"actor_rollout_ref.actor.fsdp_config.optimizer_offload={offload}",
        "actor_rollout_ref.rollout.name=hf",
        "actor_rollout_ref.rollout.n=1",
        f"actor_rollout_ref.rollout.response_length={RESPONSE_LEN}",
        "actor_rollout_ref.rollout.log_prob_micro_batch_size_per_gpu=4",
        f"data.max_response_length={RESPONSE_LEN}",
    ]
    if getattr(args, "liger", False):
        overrides.append("actor_rollout_ref.model.use_liger=True")
    if args.param_dtype:
        overrides.append(f"actor_rollout_ref.actor.fsdp_config.mixed_precision={{param_dtype: {args.param_dtype}}}")
    return compose_config(overrides).actor_rollout_ref


def build_worker(args):
    from verl.single_controller.base.worker import WorkerHelper
    from verl.workers.roles.actor_rollout_ref import ActorRolloutRefWorker

    os.environ.update(
        RANK="0", WORLD_SIZE="1", LOCAL_RANK="0", LOCAL_WORLD_SIZE="1", MASTER_ADDR="127.0.0.1",
        MASTER_PORT=str(WorkerHelper._get_free_port()),
    )  # fmt: skip
    worker = ActorRolloutRefWorker(worker_config(args), role="actor")
    worker.init_model()
    return worker


def _devices(tensors) -> list[str]:
    """The device types holding ``tensors`` (an FSDP2 DTensor counts where its local shard is)."""
    return sorted({(t.to_local() if hasattr(t, "to_local") else t).device.type for t in tensors})


def where_state_lives(worker) -> dict:
    """Device types of the actor's parameters and optimizer state, their bytes there, and the memory in use."""
    from verl.utils.device import get_torch_device, is_accelerator_available

    params = list(worker.actor_module.parameters())
    state = worker.actor_engine.optimizer.state.values()
    optim = [v for s in state for v in s.values() if torch.is_tensor(v) and v.dim()]
    allocated = get_torch_device().memory_allocated() if is_accelerator_available() else 0
    local = [t.to_local() if hasattr(t, "to_local") else t for t in params + optim]
    on_device = sum(t.numel() * t.element_size() for t in local if t.device.type != "cpu")
    return {
        "param_devices": _devices(params),
        "optim_devices": _devices(optim),
        "allocated_bytes": allocated,
        "state_device_bytes": on_device,  # what parameters and optimizer state occupy on the accelerator
    }


def log_probs(worker, batch) -> torch.Tensor:
    return worker.compute_log_prob(batch).batch["old_log_probs"].float()


def update(worker, batch) -> dict:
    metrics = worker.update_actor(batch).meta_info["metrics"]
    return {k: [float(x) for x in v] if isinstance(v, list) else float(v) for k, v in metrics.items()}


def run_steps(out: str, *args: str, cpu_reference: bool = False, timeout: int = 600) -> dict:
    """Run this module in a fresh process (hiding the GPUs for a CPU reference) and return what it saved."""
    env = dict(os.environ, PYTHONPATH=ROOT, TOKENIZERS_PARALLELISM="false")
    if cpu_reference:
        env["CUDA_VISIBLE_DEVICES"] = ""
    cmd = [sys.executable, "-m", "tests.workers.gpu_actor_steps", "--out", out, *args]
    proc = subprocess.run(cmd, cwd=ROOT, env=env, capture_output=True, text=True, timeout=timeout)
    assert proc.returncode == 0, f"{' '.join(cmd)} failed:\n{proc.stdout[-3000:]}\n{proc.stderr[-6000:]}"
    return torch.load(out, weights_only=False)


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", required=True)
    parser.add_argument("--out", required=True)
    parser.add_argument("--mode", choices=["step", "save", "resume"], default="step")
    parser.add_argument("--strategy", choices=["fsdp", "fsdp2"], default="fsdp2")
    parser.add_argument("--param-dtype", default=None, help="FSDP mixed-precision param dtype (default: the engine's)")
    parser.add_argument("--offload", action="store_true", help="param_offload and optimizer_offload on")
    parser.add_argument("--ckpt", default=None)
    parser.add_argument("--no-load", action="store_true", help="--mode resume without loading (the control run)")
    parser.add_argument("--lr", type=float, default=1e-3)
    parser.add_argument("--liger", action="store_true", help="actor_rollout_ref.model.use_liger=True")
    args = parser.parse_args(argv)

    from verl.utils.device import get_device_name

    worker = build_worker(args)
    vocab = worker.hf_config.vocab_size
    first, second = rollout_batch(len(worker.tokenizer), seed=1), rollout_batch(len(worker.tokenizer), seed=2)
    result: dict = {"device": get_device_name(), "vocab": vocab, "response_mask": first.batch["response_mask"]}
    if args.mode == "step":
        # the class names the actor's modules report (Liger renames the ones it patches, e.g. LigerRMSNorm)
        result["module_names"] = sorted({m._get_name() for m in worker.actor_module.modules()})
        result["after_init"] = where_state_lives(worker)
        result["log_probs_before"] = log_probs(worker, first)
        result["between_calls"] = where_state_lives(worker)
        result["metrics"] = update(worker, first)
        result["after_update"] = where_state_lives(worker)
        result["log_probs_after"] = log_probs(worker, first)
    elif args.mode == "save":
        result["metrics"] = update(worker, first)
        worker.save_checkpoint(args.ckpt, global_step=1)
        result["metrics_second"] = update(worker, second)
        result["log_probs_after"] = log_probs(worker, second)
    else:
        if not args.no_load:
            worker.load_checkpoint(args.ckpt)
        result["metrics_second"] = update(worker, second)
        result["log_probs_after"] = log_probs(worker, second)
    torch.save(result, args.out)


if __name__ == "__main__":
    main()
