"""Build the model that ``python -m verl.trainer.main_ppo`` trains by default (``verl/assets/default_model``).

    python scripts/build_default_model.py            # writes verl/assets/default_model (about 4 MB)
    python scripts/build_default_model.py --out DIR  # elsewhere

Deterministic recipe, CPU only, nothing downloaded:

1. the arithmetic task (``verl.demo.arithmetic_task``, seed 0) is written to a work folder,
   including its *noisy* SFT corpus (60% of answers off by one);
2. a seeded random Qwen2 model with the shipped byte-level tokenizer (``verl.demo.tiny_model``);
3. the SFT trainer (``torchrun -m verl.trainer.fsdp_sft_trainer``, one process, gloo) fits it to the corpus;
4. the final ``global_step_N`` Hugging Face folder is copied to ``--out`` with a generation config.

The same command on the same machine gives the same weights. The figures it prints (wall time, SFT loss) are the
ones quoted in docs/default_run.md.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
DEFAULT_OUT = os.path.join(REPO, "verl", "assets", "default_model")

# Model and SFT recipe (see docs/default_run.md for why these values).
MODEL = {"hidden_size": 128, "num_layers": 4, "num_heads": 4, "num_kv_heads": 2, "intermediate_size": 512}
MODEL_SEED = 0
SFT = {
    "steps": 600,
    "batch_size": 64,
    "lr": 3e-3,
    "max_length": 32,
    "seed": 1,
}


def sft_command(init_dir: str, data: dict, ckpt_dir: str, sft: dict) -> list[str]:
    """The torchrun command line of the SFT stage (one CPU process)."""
    return [
        sys.executable,
        "-m",
        "torch.distributed.run",
        "--standalone",
        "--nproc_per_node=1",
        "-m",
        "verl.trainer.fsdp_sft_trainer",
        f"data.train_files={data['sft_train']}",
        f"data.val_files={data['sft_test']}",
        "data.prompt_key=prompt",
        "data.response_key=response",
        f"data.max_length={sft['max_length']}",
        f"data.train_batch_size={sft['batch_size']}",
        f"data.micro_batch_size_per_gpu={sft['batch_size']}",
        f"model.partial_pretrain={init_dir}",
        "model.enable_gradient_checkpointing=False",
        "model.strategy=fsdp2",
        f"optim.lr={sft['lr']}",
        "optim.warmup_steps_ratio=0.05",
        "optim.lr_scheduler=cosine",
        f"trainer.total_training_steps={sft['steps']}",
        "trainer.total_epochs=100",
        f"trainer.seed={sft['seed']}",
        f"trainer.default_local_dir={ckpt_dir}",
        "trainer.project_name=verl_default_model",
        "trainer.experiment_name=arithmetic_sft",
        "trainer.logger=['console']",
        "trainer.n_gpus_per_node=1",
        f"trainer.test_freq={sft['steps']}",
    ]


def build(out_dir: str, work_dir: str, sft: dict | None = None, threads: int | None = None) -> dict:
    """Run the recipe; returns figures (seconds, paths). ``out_dir`` is replaced."""
    from verl.demo.arithmetic_task import write_dataset
    from verl.demo.tiny_model import make_tiny_model_dir

    sft = dict(SFT, **(sft or {}))
    start = time.time()
    data = write_dataset(os.path.join(work_dir, "data"))
    init_dir = make_tiny_model_dir(
        os.path.join(work_dir, "init"), seed=MODEL_SEED, max_position_embeddings=sft["max_length"] * 4, **MODEL
    )
    ckpt_dir = os.path.join(work_dir, "sft")
    env = dict(os.environ, TOKENIZERS_PARALLELISM="false", CUDA_VISIBLE_DEVICES="")
    if threads:
        env["OMP_NUM_THREADS"] = str(threads)
    sft_start = time.time()
    subprocess.run(sft_command(init_dir, data, ckpt_dir, sft), check=True, env=env, cwd=REPO)
    sft_seconds = time.time() - sft_start
    final = os.path.join(ckpt_dir, f"global_step_{sft['steps']}")
    if os.path.isdir(out_dir):
        shutil.rmtree(out_dir)
    shutil.copytree(final, out_dir)
    # Ship the tokenizer files exactly as the init had them (portable across transformers 4.x/5.x), and the
    # generation config that stops sampling at the tokenizer's eos.
    for name in ("tokenizer_config.json", "chat_template.jinja", "tokenizer.json", "generation_config.json"):
        src = os.path.join(init_dir, name)
        if os.path.isfile(src):
            shutil.copy(src, os.path.join(out_dir, name))
    return {"out_dir": out_dir, "sft_seconds": round(sft_seconds, 1), "total_seconds": round(time.time() - start, 1)}


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", default=DEFAULT_OUT, help="model folder to (re)write")
    parser.add_argument("--work_dir", default=None, help="keep data/init/checkpoints here (default: a temp dir)")
    parser.add_argument("--steps", type=int, default=SFT["steps"])
    parser.add_argument("--threads", type=int, default=None, help="OMP_NUM_THREADS for the SFT process")
    args = parser.parse_args(argv)
    if args.work_dir:
        os.makedirs(args.work_dir, exist_ok=True)
        figures = build(args.out, args.work_dir, {"steps": args.steps}, args.threads)
    else:
        with tempfile.TemporaryDirectory() as work_dir:
            figures = build(args.out, work_dir, {"steps": args.steps}, args.threads)
    print(json.dumps(figures))


if __name__ == "__main__":
    main()
