"""The reward-loop checks: a served generative reward model, hybrid sources and the remote manager are refused
before Ray when they cannot run, each message naming the key and the value."""

import pytest

from verl.trainer.config import PPOConfig
from verl.trainer.config.checks.reward_loop import check_reward_loop, served_model_paths, serves_reward_model

SERVED = {
    "use_reward_loop": True,
    "enable": True,
    "model": {"path": "/judge"},
    "rollout": {"name": "hf", "tensor_model_parallel_size": 1},
}


def config(reward_model=None, custom_path="/fn.py", raw_chat=False):
    return PPOConfig.from_config(
        {
            "reward_model": reward_model or {},
            "custom_reward_function": {"path": custom_path},
            "data": {"return_raw_chat": raw_chat},
        }
    )


def problems(**kwargs):
    return check_reward_loop(config(**kwargs), check_paths=False)


def test_defaults_and_a_servable_judge_pass():
    assert problems(custom_path=None) == []
    assert serves_reward_model(config(SERVED)) and problems(reward_model=SERVED) == []
    assert not serves_reward_model(config({"use_reward_loop": True}))


@pytest.mark.parametrize(
    ("change", "needle"),
    [
        ({"rollout": {"name": None, "tensor_model_parallel_size": 1}}, "reward_model.rollout.name=None"),
        ({"rollout": {"name": "sglang", "tensor_model_parallel_size": 1}}, "reward_model.rollout.name='sglang'"),
        ({"rollout": {"name": "hf", "tensor_model_parallel_size": 1, "gpu_memory_utilization": 0}}, "in (0, 1]"),
        ({"rollout": {"name": "hf", "tensor_model_parallel_size": 2}}, "tensor_model_parallel_size=2"),
        ({"enable_resource_pool": True}, "enable_resource_pool=True with n_gpus_per_node=0"),
        ({"launch_reward_fn_async": True}, "launch_reward_fn_async=True"),
    ],
)
def test_a_served_model_that_cannot_run_is_refused(change, needle):
    found = problems(reward_model={**SERVED, **change})
    assert len(found) == 1 and needle in found[0], found


def test_a_vllm_served_judge_needs_vllm(monkeypatch):
    import importlib.util

    vllm_judge = {**SERVED, "rollout": {"name": "vllm", "tensor_model_parallel_size": 1}}
    find_spec = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *a: find_spec("json") if name == "vllm" else None)
    assert problems(reward_model=vllm_judge) == []
    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *a: None if name == "vllm" else find_spec(name))
    found = problems(reward_model=vllm_judge)
    assert len(found) == 1 and "reward_model.rollout.name=vllm: vLLM is not installed" in found[0], found
    assert "reward_model.rollout.name=hf" in found[0]


def test_what_is_served_judge_discriminative_or_both():
    """verl's one path: model.path is the judge when a function calls the router, else a discriminative model;
    reward_model.judge.path gives the judge its own model, and model.path is then discriminative."""
    judge_source = {**SERVED, "reward_sources": [{"name": "judge", "path": "/judge.py"}]}
    assert served_model_paths(config(SERVED)) == ("/judge", None)
    assert served_model_paths(config(judge_source, custom_path=None)) == ("/judge", None)
    assert served_model_paths(config(SERVED, custom_path=None)) == (None, "/judge")
    both = {
        **SERVED,
        "model": {"path": "/disrm"},
        "judge": {"path": "/genrm"},
        "reward_sources": [{"name": "rm", "type": "reward_model"}, {"name": "judge", "path": "/judge.py"}],
    }
    assert served_model_paths(config(both, raw_chat=True)) == ("/genrm", "/disrm")
    assert problems(reward_model=both, raw_chat=True) == []
    assert served_model_paths(config({"model": {"path": "/rm"}, "enable": True})) == (None, None)  # the worker


def test_ambiguous_or_unusable_served_models_are_refused():
    # a DisRM source and a judge function, one model path: which is which?
    ambiguous = {**SERVED, "reward_sources": [{"name": "rm", "type": "reward_model"}, {"name": "j", "path": "/j.py"}]}
    found = problems(reward_model=ambiguous, raw_chat=True)
    assert len(found) == 1 and "reward_sources[0].type=reward_model with a served judge" in found[0], found
    assert "reward_model.model.path='/judge'" in found[0] and "set reward_model.judge.path" in found[0]
    # a served discriminative model scores the chat: it needs the raw prompt
    found = problems(reward_model=SERVED, custom_path=None)
    assert len(found) == 1 and "set data.return_raw_chat=True" in found[0], found
    assert problems(reward_model=SERVED, custom_path=None, raw_chat=True) == []
    # a judge nobody calls, and a judge path without serving
    found = problems(reward_model={**SERVED, "judge": {"path": "/genrm"}}, custom_path=None, raw_chat=True)
    assert len(found) == 1 and "reward_model.judge.path='/genrm' serves a generative judge" in found[0], found
    found = problems(reward_model={"judge": {"path": "/genrm"}})
    assert len(found) == 1 and "reward_model.judge.path='/genrm' is read only when" in found[0], found


def test_serving_keys_without_serving_are_refused():
    for change, needle in [
        ({"nnodes": 1}, "reward_model.nnodes=1"),
        ({"rollout": {"name": "hf"}}, "reward_model.rollout.*"),
        ({"num_workers": 2}, "reward_model.num_workers=2 is read only by the reward loop"),
    ]:
        found = problems(reward_model=change)
        assert len(found) == 1 and needle in found[0], found
    assert problems(reward_model={"reward_manager": "remote", "num_workers": 2}) == []
    assert "num_workers=0" in problems(reward_model={"reward_manager": "remote", "num_workers": 0})[0]
    # the reward loop's scoring threads
    assert problems(reward_model={"use_reward_loop": True, "num_workers": 2}) == []
    assert problems(reward_model={**SERVED, "num_workers": 1}) == []
    found = problems(reward_model={"use_reward_loop": True, "num_workers": 0})
    assert len(found) == 1 and "num_workers=0 must be >= 1 for the reward loop" in found[0], found


def test_a_reward_model_that_names_its_engine_is_served():
    """verl 0.7 and later serve the reward model through the reward loop (on by default there) whenever it names an
    engine; without one, enable=True is verl v0.4's reward-model worker."""
    named = {"enable": True, "model": {"path": "/judge"}, "rollout": {"name": "hf", "tensor_model_parallel_size": 1}}
    assert serves_reward_model(config(named)) and config(named).reward_model.use_reward_loop
    assert problems(reward_model=named) == []
    assert not serves_reward_model(config({"enable": True, "model": {"path": "/rm"}}))
    # an engine without a reward model to serve is still refused
    found = problems(reward_model={"rollout": {"name": "hf"}})
    assert len(found) == 1 and "set reward_model.enable=True" in found[0], found


def test_the_reward_managers_source():
    def manager(**reward_manager):
        return PPOConfig.from_config({"reward": {"reward_manager": reward_manager}})

    assert check_reward_loop(manager(source="register"), check_paths=False) == []
    found = check_reward_loop(manager(source="pkg"), check_paths=False)
    assert found == ["reward.reward_manager.source='pkg': expected one of ['register', 'importlib']"]
    found = check_reward_loop(manager(source="importlib"), check_paths=False)
    assert len(found) == 1 and "set reward.reward_manager.module.path" in found[0], found
    importlib_manager = manager(source="importlib", module={"path": "/no/such/manager.py"})
    assert check_reward_loop(importlib_manager, check_paths=False) == []
    found = check_reward_loop(importlib_manager, check_paths=True)
    assert found == ["reward.reward_manager.module.path='/no/such/manager.py': file not found"]
    found = check_reward_loop(manager(module={"path": "/m.py"}), check_paths=False)
    assert len(found) == 1 and "module.path='/m.py' is read only with reward.reward_manager.source=" in found[0]


def test_hybrid_sources():
    ok = {"reward_sources": [{"name": "rule"}, {"name": "judge", "path": "/j.py", "weight": 0.5}]}
    assert problems(reward_model=ok) == []
    cases = [
        ({"reward_sources": [{"name": "a"}, {"name": "a"}]}, "unique"),
        ({"reward_sources": [{"name": "a", "type": "genrm"}]}, "reward_sources[0].type='genrm'"),
        ({"reward_sources": [{"name": "a", "weight": float("nan")}]}, "reward_sources[0].weight=nan"),
        ({"reward_sources": [{"name": "rm", "type": "reward_model"}]}, "set reward_model.enable=True"),
        ({"reward_combine": {"path": "/c.py"}}, "reward_model.reward_sources is empty"),
    ]
    for change, needle in cases:
        found = problems(reward_model=change)
        assert len(found) == 1 and needle in found[0], (change, found)
    rm_source = {"enable": True, "reward_sources": [{"name": "rm", "type": "reward_model"}]}
    assert problems(reward_model=rm_source) == []
    missing = check_reward_loop(config({"reward_sources": [{"name": "j", "path": "/no/such.py"}]}), check_paths=True)
    assert missing == ["reward_model.reward_sources[0].path='/no/such.py': reward function file not found"]


def test_the_reward_loop_and_the_ray_reward_task_are_not_both_on():
    found = problems(reward_model={"use_reward_loop": True, "launch_reward_fn_async": True})
    assert len(found) == 1 and "launch_reward_fn_async=True with reward_model.use_reward_loop=True" in found[0]
    assert problems(reward_model={"use_reward_loop": True}) == []
