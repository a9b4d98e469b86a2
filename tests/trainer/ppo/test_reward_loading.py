"""verl.trainer.ppo.reward: custom reward function loading, manager construction, compute_reward."""

import numpy as np
import pytest
import torch
from omegaconf import OmegaConf

from verl import DataProto
from verl.demo.tiny_model import shipped_tokenizer_path
from verl.trainer.ppo.reward import compute_reward, compute_reward_async, get_custom_reward_fn, load_reward_manager
from verl.utils.reward_score import default_compute_score
from verl.utils.tokenizer import hf_tokenizer
from verl.workers.reward_manager import BatchRewardManager, DAPORewardManager, NaiveRewardManager

REWARD_FILE = """
def compute_score(data_source, solution_str, ground_truth, extra_info=None, scale=1.0):
    return {"score": scale * float(solution_str == ground_truth), "src": data_source}

def other(*args, **kwargs):
    return kwargs
"""


@pytest.fixture(scope="module")
def tokenizer():
    return hf_tokenizer(shipped_tokenizer_path())


def _config(tmp_path, **sections):
    path = tmp_path / "my_reward.py"
    path.write_text(REWARD_FILE)
    base = {
        "custom_reward_function": {"path": str(path), "name": "compute_score", "reward_kwargs": {"scale": 3.0}},
        "reward_model": {"reward_manager": "naive", "sandbox_fusion": {"url": None}},
        "data": {"reward_fn_key": "data_source"},
    }
    base.update(sections)
    return OmegaConf.create(base)


def _batch(tokenizer, responses, ground_truths, key="data_source"):
    ids = [tokenizer.encode(r, add_special_tokens=False) for r in responses]
    width = max(len(i) for i in ids)
    responses_t = torch.full((len(ids), width), 256)
    mask = torch.zeros(len(ids), 2 + width, dtype=torch.long)
    mask[:, :2] = 1
    for row, i in enumerate(ids):
        responses_t[row, : len(i)] = torch.tensor(i)
        mask[row, 2 : 2 + len(i)] = 1
    return DataProto.from_dict(
        tensors={"prompts": torch.full((len(ids), 2), 65), "responses": responses_t, "attention_mask": mask},
        non_tensors={
            key: np.array(["src"] * len(ids), dtype=object),
            "reward_model": np.array([{"ground_truth": g} for g in ground_truths], dtype=object),
        },
    )


def test_custom_fn_binds_reward_kwargs(tmp_path):
    fn = get_custom_reward_fn(_config(tmp_path))
    assert fn("ds", "a", "a") == {"score": 3.0, "src": "ds"}
    assert fn.__name__ == "compute_score"


def test_custom_fn_absent_or_broken(tmp_path):
    assert get_custom_reward_fn(OmegaConf.create({"custom_reward_function": {"path": None}})) is None
    assert get_custom_reward_fn(OmegaConf.create({})) is None
    missing = tmp_path / "nope.py"
    with pytest.raises(FileNotFoundError, match="nope.py"):
        get_custom_reward_fn(OmegaConf.create({"custom_reward_function": {"path": str(missing), "name": "f"}}))
    config = _config(tmp_path)
    config.custom_reward_function.name = "not_there"
    with pytest.raises(AttributeError, match="not_there"):
        get_custom_reward_fn(config)
    broken = tmp_path / "broken.py"
    broken.write_text("raise ValueError('boom at import')\n")
    with pytest.raises(RuntimeError, match="boom at import"):
        get_custom_reward_fn(OmegaConf.create({"custom_reward_function": {"path": str(broken), "name": "f"}}))


def test_load_reward_manager_with_custom_fn(tmp_path, tokenizer):
    manager = load_reward_manager(_config(tmp_path), tokenizer, num_examine=0, timeout_s=5)
    assert isinstance(manager, NaiveRewardManager) and manager.timeout_s == 5
    data = _batch(tokenizer, ["yes", "no"], ["yes", "yes"])
    reward_tensor, extra = compute_reward(data, manager)
    assert reward_tensor[0, 2] == 3.0 and reward_tensor.sum() == 3.0
    assert extra == {"score": [3.0, 0.0], "src": ["src", "src"]}


def test_load_reward_manager_default_and_key(tmp_path, tokenizer):
    config = _config(tmp_path, data={"reward_fn_key": "source"})
    config.custom_reward_function.path = None
    config.reward_model.reward_manager = "dapo"
    manager = load_reward_manager(config, tokenizer, 1, max_resp_len=8, overlong_buffer_cfg={"enable": False})
    assert isinstance(manager, DAPORewardManager)
    assert manager.compute_score is default_compute_score and manager.reward_fn_key == "source"
    config.reward_model.reward_manager = "batch"
    assert isinstance(load_reward_manager(config, tokenizer, 0), BatchRewardManager)
    config.reward_model.reward_manager = "nope"
    with pytest.raises(ValueError, match="Unknown reward manager: nope"):
        load_reward_manager(config, tokenizer, 0)


def test_compute_reward_falls_back_to_old_contract(tokenizer):
    def old_style(data):
        return torch.ones(len(data), 3)

    reward_tensor, extra = compute_reward(_batch(tokenizer, ["a"], ["a"]), old_style)
    assert torch.equal(reward_tensor, torch.ones(1, 3)) and extra == {}


def test_compute_reward_async_body_runs_without_ray(tmp_path, tokenizer):
    config = _config(tmp_path)
    config.reward_model.reward_kwargs = {"timeout_s": 5}
    reward_tensor, extra = compute_reward_async(_batch(tokenizer, ["yes"], ["yes"]), config, tokenizer)
    assert reward_tensor.sum() == 3.0 and extra["score"] == [3.0]
    assert hasattr(compute_reward_async, "remote")
