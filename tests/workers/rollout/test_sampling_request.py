"""SamplingRequest: how every engine reads its sampling from the rollout config and the batch's meta_info."""

from verl.trainer.config import RolloutConfig, SamplingConfig
from verl.workers.rollout.base import SamplingRequest


def _config(**overrides):
    return RolloutConfig(temperature=0.7, top_p=0.9, top_k=20, n=4, response_length=16, **overrides)


def test_config_values_without_meta():
    r = SamplingRequest.resolve({}, _config())
    assert (r.do_sample, r.temperature, r.top_p, r.top_k, r.n, r.response_length) == (True, 0.7, 0.9, 20, 4, 16)


def test_meta_overrides_per_call():
    r = SamplingRequest.resolve({"temperature": 1.3, "top_k": 5, "response_length": 3}, _config())
    assert (r.temperature, r.top_k, r.response_length, r.n) == (1.3, 5, 3, 4)


def test_greedy_is_one_sample_at_temperature_zero():
    for meta, cfg in (({"do_sample": False}, _config()), ({}, _config(do_sample=False))):
        r = SamplingRequest.resolve(meta, cfg)
        assert (r.do_sample, r.temperature, r.top_p, r.top_k, r.n) == (False, 0.0, 1.0, -1, 1)
    # temperature 0 means greedy, whatever do_sample says
    assert not SamplingRequest.resolve({"temperature": 0}, _config()).do_sample


def test_validation_takes_val_kwargs_and_one_sample():
    cfg = _config(val_kwargs=SamplingConfig(temperature=0.5, top_p=0.8, top_k=3, n=5, do_sample=True))
    r = SamplingRequest.resolve({"validate": True}, cfg)
    assert (r.do_sample, r.temperature, r.top_p, r.top_k, r.n) == (True, 0.5, 0.8, 3, 1)
    # the default val_kwargs (temperature 0) validate greedily
    assert not SamplingRequest.resolve({"validate": True}, _config()).do_sample


def test_engine_defaults_sit_between_config_and_meta():
    r = SamplingRequest.resolve({}, _config(), n=2, temperature=1.0)
    assert (r.n, r.temperature) == (2, 1.0)
    assert SamplingRequest.resolve({"temperature": 0.3}, _config(), temperature=1.0).temperature == 0.3
