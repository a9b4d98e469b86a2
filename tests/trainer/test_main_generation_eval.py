"""main_generation -> main_eval: the generated parquet, scores recomputed from it, pass@k by hand, config errors.

Generation runs in this process (InProcessWorkerGroup, one HF-rollout worker, a 1-layer random model): what the
Ray worker group would do, without starting Ray.
"""

import os
import re

import numpy as np
import pandas as pd
import pytest
import torch.distributed as dist
from hydra import compose, initialize_config_dir

from verl.demo.tiny_model import make_tiny_model_dir
from verl.single_controller.inprocess import InProcessWorkerGroup
from verl.trainer.config import ConfigError
from verl.trainer.config.checks.generation import check_generation_config
from verl.trainer.main_eval import evaluate, pass_at_k
from verl.trainer.main_generation import rollout_worker_config, run_generation, tokenize_chats

CONFIG_DIR = os.path.join(os.path.dirname(__file__), "..", "..", "verl", "trainer", "config")

# scores every response by its length's parity: cheap, and both 0 and 1 occur among random-model outputs
REWARD_FN = """
def compute_score(data_source, solution_str, ground_truth, extra_info=None):
    bonus = 1.0 if data_source == "src/b" else 0.0
    return {"score": float(len(solution_str) % 2) + bonus, "acc": len(solution_str) % 2 == 1}
"""


def compose_config(name: str, overrides: list[str]):
    with initialize_config_dir(config_dir=os.path.abspath(CONFIG_DIR), version_base=None):
        return compose(name, overrides=overrides)


def _prompt_rows(n: int) -> list[dict]:
    return [
        {
            "data_source": "src/a" if i % 2 == 0 else "src/b",
            "prompt": [{"role": "user", "content": f"{i}+{i}=" + "x" * (3 * i)}],
            "reward_model": {"style": "rule", "ground_truth": str(2 * i)},
            "extra_info": {"index": i},
        }
        for i in range(n)
    ]


@pytest.fixture(scope="module")
def workspace(tmp_path_factory):
    root = tmp_path_factory.mktemp("generation")
    model = make_tiny_model_dir(
        str(root / "model"), hidden_size=32, num_layers=1, num_heads=2, num_kv_heads=1, intermediate_size=64
    )
    data = str(root / "prompts.parquet")
    pd.DataFrame(_prompt_rows(5)).to_parquet(data)
    reward = root / "reward.py"
    reward.write_text(REWARD_FN)
    yield {"root": root, "model": model, "data": data, "reward": str(reward)}
    if dist.is_initialized():
        dist.destroy_process_group()


def generation_overrides(ws, **changes) -> list[str]:
    values = {
        "trainer.device": "cpu",
        "trainer.n_gpus_per_node": 1,
        "data.path": ws["data"],
        "data.n_samples": 3,
        "data.batch_size": 2,
        "data.output_path": str(ws["root"] / "out" / "nested" / "generated.parquet"),
        "model.path": ws["model"],
        "rollout.name": "hf",
        "rollout.prompt_length": 16,
        "rollout.response_length": 6,
    }
    values.update(changes)
    return [f"{key}={value}" for key, value in values.items()]


def test_generation_then_eval_round_trip(workspace):
    config = compose_config("generation", generation_overrides(workspace))
    returned = run_generation(config, worker_group_cls=InProcessWorkerGroup)
    written = pd.read_parquet(config.data.output_path)  # the nested output directory was created

    source = pd.read_parquet(workspace["data"])
    assert list(written.columns) == [*source.columns, "responses"]
    assert len(written) == 5 and written["data_source"].tolist() == source["data_source"].tolist()
    responses = [list(r) for r in written["responses"]]
    assert all(len(r) == 3 and all(isinstance(s, str) for s in r) for r in responses)
    assert responses == [list(r) for r in returned["responses"]]
    # samples of one prompt are drawn independently (the worker's sampling seed is per call, not per row)
    assert any(len(set(r)) > 1 for r in responses)

    eval_config = compose_config(
        "evaluation", [f"data.path={config.data.output_path}", f"custom_reward_function.path={workspace['reward']}"]
    )
    metrics = evaluate(eval_config)

    expected = {}
    for source_name in ("src/a", "src/b"):
        rows = [r for r, s in zip(responses, written["data_source"], strict=True) if s == source_name]
        bonus = 1.0 if source_name == "src/b" else 0.0
        parity = [[len(s) % 2 for s in r] for r in rows]
        expected[f"test_score/{source_name}"] = np.mean([np.mean([p + bonus for p in row]) for row in parity])
        expected[f"pass@1/{source_name}"] = np.mean([np.mean(row) for row in parity])
        expected[f"pass@3/{source_name}"] = np.mean([float(any(row)) for row in parity])
    assert metrics.keys() == expected.keys()
    for key, value in expected.items():
        assert metrics[key] == pytest.approx(value), key


def test_tokenize_chats_left_pads_and_keeps_the_prompt_end():
    from verl.demo.tiny_model import shipped_tokenizer_path
    from verl.utils.tokenizer import hf_tokenizer

    tokenizer = hf_tokenizer(shipped_tokenizer_path())
    chats = [[{"role": "user", "content": "1+1="}], [{"role": "user", "content": "long " * 20 + "2+2="}]]
    texts = [tokenizer.apply_chat_template(c, add_generation_prompt=True, tokenize=False) for c in chats]
    full = [tokenizer(text, add_special_tokens=False)["input_ids"] for text in texts]
    batch = tokenize_chats(tokenizer, chats, prompt_length=24)
    ids, mask, pos = batch.batch["input_ids"], batch.batch["attention_mask"], batch.batch["position_ids"]
    assert ids.shape == (2, 24)
    short = len(full[0])
    assert mask[0].tolist() == [0] * (24 - short) + [1] * short
    assert ids[0, 24 - short :].tolist() == full[0]
    assert ids[1].tolist() == full[1][-24:]  # too long: cut from the left, the generation header survives
    assert pos[0, 24 - short :].tolist() == list(range(short)) and pos[1].tolist() == list(range(24))


def test_pass_at_k_per_data_source_from_a_hand_built_file(tmp_path):
    rows = [
        # gsm8k rule: 1 for the right '#### n', else 0
        ("openai/gsm8k", ["#### 3", "#### 4", "no answer"], "3"),  # 1 of 3 correct
        ("openai/gsm8k", ["#### 1", "#### 1", "#### 1"], "2"),  # none
        ("openai/gsm8k", ["#### 2", "#### 2", "#### 5"], "2"),  # 2 of 3
        # MATH rule on the last \boxed{}
        ("lighteval/MATH", ["\\boxed{\\frac{1}{2}}", "\\boxed{0.5}"], "\\frac12"),  # both equal after normalizing
        ("lighteval/MATH", ["\\boxed{3}", "none"], "4"),  # none
    ]
    path = tmp_path / "responses.parquet"
    pd.DataFrame(
        [{"data_source": s, "responses": r, "reward_model": {"ground_truth": g}, "prompt": "p"} for s, r, g in rows]
    ).to_parquet(path)
    metrics = evaluate(compose_config("evaluation", [f"data.path={path}"]))  # no custom fn: built-in rules
    assert metrics == pytest.approx(
        {
            "test_score/openai/gsm8k": (1 / 3 + 0 + 2 / 3) / 3,
            "pass@1/openai/gsm8k": (1 / 3 + 0 + 2 / 3) / 3,
            "pass@3/openai/gsm8k": 2 / 3,
            "test_score/lighteval/MATH": 0.5,
            "pass@1/lighteval/MATH": 0.5,
            "pass@2/lighteval/MATH": 0.5,
        }
    )


def test_pass_at_k_estimator_by_hand():
    assert pass_at_k(5, 2, 2) == pytest.approx(1 - 3 / 10)  # 1 - C(3,2)/C(5,2)
    assert pass_at_k(4, 1, 1) == pytest.approx(0.25)
    assert pass_at_k(4, 0, 4) == 0.0 and pass_at_k(4, 1, 4) == 1.0
    with pytest.raises(ValueError):
        pass_at_k(3, 4, 1)


@pytest.mark.parametrize(
    ("changes", "message"),
    [
        ({"data.path": "/nonexistent/p.parquet"}, "data.path: file '/nonexistent/p.parquet' does not exist"),
        ({"model.path": "/nonexistent/model"}, "model.path: '/nonexistent/model' is not a model directory"),
        ({"data.prompt_key": "question"}, "data.prompt_key='question' is not a column of data.path"),
        ({"rollout.temperature": 0}, "data.n_samples=3 needs rollout.temperature > 0, got 0"),
        ({"rollout.do_sample": False}, "data.n_samples=3 needs rollout.do_sample=True"),
        ({"data.batch_size": 0}, "data.batch_size=0 must be an integer >= 1"),
        ({"data.n_samples": 0}, "data.n_samples=0 must be an integer >= 1"),
        ({"rollout.n": 4}, "rollout.n=4 must be 1 here; set the responses per prompt with data.n_samples"),
        ({"rollout.name": "sglang"}, "rollout.name='sglang' is not supported by main_generation"),
        ({"trainer.device": "tpu"}, "trainer.device='tpu' is not supported"),
        ({"rollout.tensor_model_parallel_size": 2}, "rollout.tensor_model_parallel_size=2 must divide"),
    ],
)
def test_bad_generation_config_is_refused_naming_the_key(workspace, changes, message):
    config = compose_config("generation", generation_overrides(workspace, **changes))
    with pytest.raises(ConfigError) as info:
        run_generation(config, worker_group_cls=InProcessWorkerGroup)  # refused before any worker is built
    assert message in str(info.value)


def _with_data(workspace, path):
    return compose_config("generation", generation_overrides(workspace, **{"data.path": str(path)}))


def test_a_data_path_that_is_not_parquet_or_is_empty_is_refused_naming_the_file(workspace, tmp_path):
    text = tmp_path / "prompts.parquet"
    text.write_text("prompt\n1+1\n")
    with pytest.raises(ConfigError, match=r"data.path: '.*prompts.parquet' is not a parquet file"):
        check_generation_config(_with_data(workspace, text))
    empty = tmp_path / "empty.parquet"
    pd.DataFrame({"prompt": pd.Series([], dtype=object)}).to_parquet(empty)
    with pytest.raises(ConfigError, match=r"data.path: '.*empty.parquet' has no rows"):
        check_generation_config(_with_data(workspace, empty))


def test_every_problem_is_reported_at_once_and_greedy_single_sample_is_fine(workspace):
    config = compose_config("generation", generation_overrides(workspace, **{"data.batch_size": 0, "rollout.n": 2}))
    with pytest.raises(ConfigError, match=r"(?s)data.batch_size=0.*rollout.n=2"):
        check_generation_config(config)
    greedy = compose_config(
        "generation", generation_overrides(workspace, **{"data.n_samples": 1, "rollout.temperature": 0})
    )
    check_generation_config(greedy)
    worker = rollout_worker_config(greedy)
    assert sorted(worker) == ["actor", "model", "rollout"] and worker.rollout.n == 1
    assert worker.rollout.kv_cache_sequences == 2  # batch_size 2 * n_samples 1 over 1 worker


@pytest.mark.parametrize(
    ("overrides", "message"),
    [
        (["data.path=/nonexistent.parquet"], "data.path='/nonexistent.parquet': file does not exist"),
        (["data.response_key=answers"], "data.response_key='answers' is not a column of data.path"),
        (["custom_reward_function.path=/nonexistent.py"], "custom_reward_function.path: file '/nonexistent.py'"),
    ],
)
def test_bad_eval_config_is_refused_naming_the_key(tmp_path, overrides, message):
    path = tmp_path / "responses.parquet"
    row = {"data_source": "openai/gsm8k", "responses": ["#### 1"], "reward_model": {"ground_truth": "1"}}
    pd.DataFrame([row]).to_parquet(path)
    config = compose_config("evaluation", [f"data.path={path}", *overrides])
    with pytest.raises(ConfigError, match="^" + re.escape(message)):
        evaluate(config)


@pytest.mark.slow
def test_command_lines_on_two_ray_workers(workspace, tmp_path):
    """``python -m verl.trainer.main_generation`` / ``main_eval`` as a user runs them: 3 prompts on 2 Ray workers
    (the batch is padded to the world size and the padding dropped again), then scored from the command line."""
    import ast
    import subprocess
    import sys

    repo_root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    # a fresh local Ray: never attach to a cluster another process on this machine left running
    env = {**os.environ, "PYTHONPATH": repo_root, "RAY_ADDRESS": "local"}

    def run(entry: str, args: list[str]) -> str:
        command = [sys.executable, "-m", f"verl.trainer.{entry}", *args]
        done = subprocess.run(command, cwd=str(tmp_path), env=env, capture_output=True, text=True, timeout=600)
        assert done.returncode == 0, done.stderr[-4000:]
        return done.stdout

    output = tmp_path / "cli" / "generated.parquet"
    overrides = generation_overrides(
        workspace,
        **{"trainer.n_gpus_per_node": 2, "data.n_samples": 1, "data.batch_size": 3, "data.output_path": str(output)},
    )
    run("main_generation", [*overrides, "ray_init.num_cpus=3"])
    written = pd.read_parquet(output)
    assert len(written) == 5 and all(len(r) == 1 for r in written["responses"])
    stdout = run("main_eval", [f"data.path={output}", f"custom_reward_function.path={workspace['reward']}"])
    metrics = ast.literal_eval(stdout.strip().splitlines()[-1])
    odd = [len(r[0]) % 2 for r in written["responses"]]
    assert metrics["pass@1/src/a"] == pytest.approx(np.mean(odd[0::2]))
    assert metrics["test_score/src/b"] == pytest.approx(np.mean(odd[1::2]) + 1.0)
