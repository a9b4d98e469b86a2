"""The served generative reward model: an HF replica answering OpenAI chat-completion requests, the router on
127.0.0.1 that balances them over replicas, Ray-actor replicas, and the binding of verl's reward-loop arguments."""

import asyncio
import json
import pickle
import threading
import time
import urllib.error
import urllib.request

import pytest

from verl.demo.tiny_model import make_tiny_model_dir
from verl.trainer.ppo.reward import bind_reward_loop_args
from verl.workers.reward_manager.async_scoring import is_async_fn
from verl.workers.reward_model.served import HFChatReplica, RewardRouter, ServedRewardModel


@pytest.fixture(scope="module")
def judge_dir(tmp_path_factory):
    path = tmp_path_factory.mktemp("judge") / "model"
    return make_tiny_model_dir(str(path), hidden_size=64, num_layers=1, num_heads=4, num_kv_heads=2)


def post(address, body, path="/v1/chat/completions"):
    request = urllib.request.Request(f"http://{address}{path}", data=json.dumps(body).encode())
    with urllib.request.urlopen(request, timeout=60) as response:
        return json.loads(response.read())


def test_replica_answers_in_openai_format_and_caps_tokens(judge_dir):
    replica = HFChatReplica(judge_dir, dtype="float32", max_response_tokens=3)
    out = replica.chat({"messages": [{"role": "user", "content": "2+2="}], "max_tokens": 50, "temperature": 0, "n": 2})
    assert out["object"] == "chat.completion" and len(out["choices"]) == 2
    assert [c["index"] for c in out["choices"]] == [0, 1]
    assert all(isinstance(c["message"]["content"], str) for c in out["choices"])
    # greedy: both choices are the same text; max_tokens is capped by max_response_tokens
    assert out["choices"][0]["message"] == out["choices"][1]["message"]
    assert out["usage"]["completion_tokens"] <= 2 * 3
    assert out["usage"]["prompt_tokens"] > 0
    with pytest.raises(ValueError, match="messages"):
        replica.chat({"messages": []})


def test_router_balances_and_speaks_the_protocol():
    in_flight, peak, lock = [0, 0], [0, 0], threading.Lock()

    def backend(k):
        def call(request):
            with lock:
                in_flight[k] += 1
                peak[k] = max(peak[k], in_flight[k])
            time.sleep(0.02)
            with lock:
                in_flight[k] -= 1
            return {"choices": [{"index": 0, "message": {"role": "assistant", "content": f"{k}"}}]}

        return call

    router = RewardRouter([backend(0), backend(1)], served_name="judge")
    try:
        host, port = router.address.split(":")
        assert host == "127.0.0.1" and int(port) > 0
        body = {"messages": [{"role": "user", "content": "x"}]}
        threads = [threading.Thread(target=post, args=(router.address, body)) for _ in range(40)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        assert sum(router.requests) == 40 and abs(router.requests[0] - router.requests[1]) <= 4, router.requests
        assert router.in_flight == [0, 0]
        models = json.loads(urllib.request.urlopen(f"http://{router.address}/v1/models").read())
        assert models["data"][0]["id"] == "judge"
        with pytest.raises(urllib.error.HTTPError) as err:
            post(router.address, body, path="/v1/completions")
        assert err.value.code == 404
    finally:
        router.close()


def test_router_reports_a_failing_replica_as_500_and_keeps_serving():
    calls = []

    def flaky(request):
        calls.append(1)
        if len(calls) == 1:
            raise RuntimeError("replica fell over")
        return {"choices": []}

    router = RewardRouter([flaky])
    try:
        with pytest.raises(urllib.error.HTTPError) as err:
            post(router.address, {"messages": [{"role": "user", "content": "x"}]})
        assert err.value.code == 500 and "replica fell over" in err.value.read().decode()
        assert post(router.address, {"messages": [{"role": "user", "content": "x"}]}) == {"choices": []}
    finally:
        router.close()


def test_served_model_in_process_and_its_pickled_address(judge_dir, monkeypatch):
    import verl.workers.reward_model.served as served_module

    # the in-process path, also when an earlier test of the session left Ray running
    monkeypatch.setattr(served_module, "_ray_running", lambda: False)
    served = ServedRewardModel(judge_dir, replicas=2, dtype="float32", max_response_tokens=2)
    try:
        out = post(served.address, {"messages": [{"role": "user", "content": "1+1="}], "temperature": 0})
        assert out["choices"][0]["finish_reason"] in ("stop", "length")
        assert not served.actors and len(served.router.backends) == 2
        copy = pickle.loads(pickle.dumps(served))  # what a Ray worker receives: the address, not the threads
        assert copy.address == served.address and copy.tokenizer.eos_token == served.tokenizer.eos_token
    finally:
        served.stop()


def test_served_model_replicas_are_ray_actors(judge_dir, ray_cluster):
    served = ServedRewardModel(judge_dir, replicas=2, num_cpus=1, dtype="float32", max_response_tokens=2)
    try:
        bodies = [{"messages": [{"role": "user", "content": f"{i}+1="}], "temperature": 0} for i in range(8)]
        threads = [threading.Thread(target=post, args=(served.address, b)) for b in bodies]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        assert len(served.actors) == 2 and sum(served.router.requests) == 8 and min(served.router.requests) >= 2
    finally:
        served.stop()


class _FakeServed:
    address = "127.0.0.1:1"
    tokenizer = "tok"


def test_bind_passes_only_the_arguments_a_function_takes():
    def explicit(data_source, solution_str, ground_truth, extra_info=None, reward_router_address=None):
        return reward_router_address

    def catch_all(data_source, solution_str, ground_truth, extra_info=None, **kwargs):
        return kwargs

    def plain(data_source, solution_str, ground_truth, extra_info=None):
        return 1.0

    async def verl_style(data_source, solution_str, ground_truth, extra_info, reward_router_address,
                         reward_model_tokenizer):  # fmt: skip
        return (reward_router_address, reward_model_tokenizer)

    served = _FakeServed()
    args = ("src", "sol", "gt", None)
    assert bind_reward_loop_args(explicit, served)(*args) == "127.0.0.1:1"
    assert bind_reward_loop_args(catch_all, served)(*args) == {
        "reward_router_address": "127.0.0.1:1",
        "reward_model_tokenizer": "tok",
    }
    assert bind_reward_loop_args(plain, served) is plain
    bound = bind_reward_loop_args(verl_style, served)
    assert is_async_fn(bound)
    assert asyncio.run(bound(*args)) == ("127.0.0.1:1", "tok")


def test_custom_function_gets_the_router_through_load_reward_manager(judge_dir, tmp_path):
    """custom_reward_function (no sources): the verl-style async judge function runs unchanged against the replica."""
    import os

    from verl.trainer.config import PPOConfig
    from verl.trainer.ppo.reward import get_served_reward_model, load_reward_manager
    from verl.utils.tokenizer import hf_tokenizer

    example = os.path.join(os.path.dirname(__file__), "..", "..", "..", "examples", "reward_loop", "judge_reward.py")
    config = PPOConfig.from_config(
        {
            "reward_model": {
                "use_reward_loop": True,
                "enable": True,
                "model": {"path": judge_dir},
                "rollout": {"name": "hf", "tensor_model_parallel_size": 1, "dtype": "float32", "response_length": 4},
            },
            "custom_reward_function": {"path": os.path.abspath(example)},
            "trainer": {"n_gpus_per_node": 1, "nnodes": 1},
        }
    )
    tokenizer = hf_tokenizer(judge_dir)
    manager = load_reward_manager(config, tokenizer, num_examine=0)
    served = get_served_reward_model(config)
    try:
        from verl.workers.reward_manager.naive import NaiveRewardManager

        assert isinstance(manager, NaiveRewardManager) and is_async_fn(manager.compute_score)
        result = asyncio.run(
            manager.compute_score("verl/arithmetic", "12", "12", {"question": "5+7="})
        )  # what the manager calls per sample
        assert 0.0 <= result["score"] <= 1.0 and served.router.requests == [1]
    finally:
        served.stop()


def test_remote_workers_call_the_served_judge(judge_dir, ray_cluster):
    """reward_manager=remote with a served judge: the bound function travels to the Ray workers with the router's
    address (not the router), and their calls reach the replicas."""
    import os
    import sys

    import numpy as np
    import torch

    from verl import DataProto
    from verl.utils.tokenizer import hf_tokenizer
    from verl.workers.reward_manager import RemoteRewardManager

    sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "..", "..", "examples", "reward_loop"))
    try:
        import judge_reward
    finally:
        sys.path.pop(0)
    tokenizer = hf_tokenizer(judge_dir)
    served = ServedRewardModel(judge_dir, replicas=1, num_cpus=0, dtype="float32", max_response_tokens=2)
    judge_fn = bind_reward_loop_args(judge_reward.compute_score, served)
    manager = RemoteRewardManager(tokenizer, 0, judge_fn, num_workers=2)
    n, plen, rlen = 4, 4, 3
    ids = torch.tensor([tokenizer.encode("1+1=", add_special_tokens=False)] * n)[:, -plen:]
    responses = torch.tensor([tokenizer.encode("2", add_special_tokens=False) * rlen] * n)
    batch = DataProto.from_dict(
        tensors={
            "prompts": ids,
            "responses": responses,
            "attention_mask": torch.ones(n, plen + rlen, dtype=torch.long),
        },
        non_tensors={
            "data_source": np.array(["verl/arithmetic"] * n, dtype=object),
            "reward_model": np.array([{"ground_truth": "2"}] * n, dtype=object),
            "extra_info": np.array([{"question": "1+1="}] * n, dtype=object),
        },
    )
    try:
        out = manager(batch, return_dict=True)
        assert len(manager._workers) == 2 and sum(served.router.requests) == n
        scores = out["reward_tensor"][:, -1]
        assert torch.all((scores >= 0) & (scores <= 1)) and "reward_call_failed" not in out["reward_extra_info"]
        assert len(out["reward_extra_info"]["judge_reply_chars"]) == n  # the judge's extra info came back per sample
    finally:
        manager.shutdown()
        served.stop()
