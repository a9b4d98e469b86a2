"""The served discriminative reward model (``POST /pooling`` behind the reward router): its score is the model's
output at the last token of the templated chat, the reward manager places it at each response's last token, and a
served judge (``reward_model.judge.path``) and the discriminative model are both sources of one hybrid reward."""

import json
import os
import urllib.error
import urllib.request

import numpy as np
import pytest
import torch
from transformers import AutoModelForTokenClassification

from tests.workers.reward_manager.conftest import make_batch, tokenizer  # noqa: F401 - fixtures
from verl.demo.tiny_model import make_tiny_model_dir
from verl.workers.reward_model.served import POOLING_ROUTE, ServedRewardModel, ServedScoreManager

EXAMPLE = os.path.join(os.path.dirname(__file__), "..", "..", "..", "examples", "reward_loop", "judge_reward.py")


@pytest.fixture(scope="module")
def rm_dir(tmp_path_factory):
    path = tmp_path_factory.mktemp("disrm") / "model"
    return make_tiny_model_dir(str(path), head="token_classification", hidden_size=64, num_layers=1)


@pytest.fixture(autouse=True)
def in_process(monkeypatch):
    import verl.workers.reward_model.served as served_module

    monkeypatch.setattr(served_module, "_ray_running", lambda: False)  # replicas in this process


def post(address, body, path=POOLING_ROUTE):
    request = urllib.request.Request(f"http://{address}{path}", data=json.dumps(body).encode())
    with urllib.request.urlopen(request, timeout=60) as response:
        return json.loads(response.read())


def direct_scores(rm_dir, chats) -> list[float]:
    from verl.utils.tokenizer import hf_tokenizer

    model, rm_tokenizer = AutoModelForTokenClassification.from_pretrained(rm_dir).eval(), hf_tokenizer(rm_dir)
    scores = []
    for chat in chats:
        text = rm_tokenizer.apply_chat_template(chat, add_generation_prompt=False, tokenize=False)
        ids = rm_tokenizer(text, add_special_tokens=False)["input_ids"]
        with torch.no_grad():
            scores.append(float(model(input_ids=torch.tensor([ids])).logits[0, -1, 0]))
    return scores


def with_chats(batch, questions):
    raw = np.empty(len(questions), dtype=object)
    raw[:] = [[{"role": "user", "content": q}] for q in questions]
    batch.non_tensor_batch["raw_prompt"] = raw
    batch.non_tensor_batch["extra_info"] = np.array([{"question": q} for q in questions], dtype=object)
    return batch


def test_pooling_scores_the_chat_and_the_manager_places_each_score(rm_dir, tokenizer, make_batch):  # noqa: F811
    served = ServedRewardModel(None, replicas=2, dtype="float32", score_model_path=rm_dir)
    try:
        chat = [{"role": "user", "content": "2+2="}, {"role": "assistant", "content": "4"}]
        out = post(served.address, {"messages": chat})
        assert out["object"] == "list" and out["data"][0]["index"] == 0
        assert out["data"][0]["data"][0] == pytest.approx(direct_scores(rm_dir, [chat])[0], abs=1e-5)
        with pytest.raises(urllib.error.HTTPError) as err:  # no judge served: no chat route
            post(served.address, {"messages": chat}, path="/v1/chat/completions")
        assert err.value.code == 404

        questions, answers = ["1+1=", "2+3=", "9+9="], ["2", "5", "18 is it"]
        batch = with_chats(make_batch(questions, answers, ["2", "5", "18"]), questions)
        result = ServedScoreManager(tokenizer, served)(batch, return_dict=True)
        expected = direct_scores(rm_dir, [[{"role": "user", "content": q}, {"role": "assistant", "content": a}]
                                          for q, a in zip(questions, answers)])  # fmt: skip
        reward = result["reward_tensor"]
        last = batch.batch["attention_mask"][:, -reward.shape[-1] :].sum(-1) - 1
        assert torch.allclose(reward[torch.arange(3), last], torch.tensor(expected), atol=1e-5)
        assert reward.abs().sum() == reward[torch.arange(3), last].abs().sum()  # nothing elsewhere
        assert result["reward_extra_info"] == {}
        assert sorted(served.router.routes[POOLING_ROUTE].requests) == [2, 2]  # balanced over the two replicas
    finally:
        served.stop()


def test_a_served_judge_and_a_discriminative_model_in_one_hybrid(rm_dir, tokenizer, make_batch, tmp_path):  # noqa: F811
    from verl.trainer.config import PPOConfig
    from verl.trainer.ppo.reward import get_served_reward_model, load_reward_manager
    from verl.workers.reward_manager import HybridRewardManager

    judge_dir = make_tiny_model_dir(str(tmp_path / "judge"), hidden_size=64, num_layers=1)
    config = PPOConfig.from_config(
        {
            "reward_model": {
                "use_reward_loop": True,
                "enable": True,
                "model": {"path": rm_dir},
                "judge": {"path": judge_dir},
                "rollout": {"name": "hf", "tensor_model_parallel_size": 1, "dtype": "float32", "response_length": 3},
                "reward_sources": [
                    {"name": "rm", "type": "reward_model"},
                    {"name": "judge", "path": os.path.abspath(EXAMPLE), "weight": 0.5},
                ],
            },
            "data": {"return_raw_chat": True},
            "trainer": {"n_gpus_per_node": 1, "nnodes": 1},
        }
    )
    manager = load_reward_manager(config, tokenizer, num_examine=0)
    served = get_served_reward_model(config)
    try:
        assert isinstance(manager, HybridRewardManager)
        assert (served.model_path, served.score_model_path) == (judge_dir, rm_dir)
        questions = ["1+1=", "2+3="]
        batch = with_chats(make_batch(questions, ["2", "6"], ["2", "5"]), questions)
        result = manager(batch, return_dict=True)
        extra = result["reward_extra_info"]
        chats = [[{"role": "user", "content": q}, {"role": "assistant", "content": a}] for q, a in zip(questions, "26")]
        assert extra["reward_source/rm"] == pytest.approx(direct_scores(rm_dir, chats), abs=1e-5)
        assert all(0.0 <= s <= 1.0 for s in extra["reward_source/judge"])
        combined = [r + 0.5 * j for r, j in zip(extra["reward_source/rm"], extra["reward_source/judge"])]
        assert result["reward_tensor"].sum(-1).tolist() == pytest.approx(combined, abs=1e-5)
        assert served.router.requests == [2] and served.router.routes[POOLING_ROUTE].requests == [2]
    finally:
        served.stop()
