"""omega_conf_to_dataclass: nested dataclasses and lists of them, field names in errors, extra keys."""

from __future__ import annotations

import dataclasses

import pytest
from omegaconf import OmegaConf

from verl.utils import omega_conf_to_dataclass
from verl.utils.config import BaseConfig


@dataclasses.dataclass
class Inner(BaseConfig):
    lr: float = 1e-3
    steps: int = 10


@dataclasses.dataclass
class Outer(BaseConfig):
    name: str = "x"
    inner: Inner = dataclasses.field(default_factory=Inner)
    stages: list[Inner] = dataclasses.field(default_factory=list)
    maybe: Inner | None = None


def test_nested_dataclasses_and_lists_are_converted_recursively():
    cfg = OmegaConf.create(
        {"name": "y", "inner": {"lr": 2}, "stages": [{"steps": 1}, {"steps": 2, "lr": 0.5}], "maybe": {"steps": 3}}
    )
    out = omega_conf_to_dataclass(cfg, Outer)
    assert isinstance(out.inner, Inner) and out.inner.lr == 2.0 and isinstance(out.inner.lr, float)
    assert [type(s) for s in out.stages] == [Inner, Inner]
    assert [s.steps for s in out.stages] == [1, 2] and out.stages[1].lr == 0.5
    assert isinstance(out.maybe, Inner) and out.maybe.steps == 3
    assert omega_conf_to_dataclass(OmegaConf.create({"maybe": None}), Outer).maybe is None


def test_interpolations_are_resolved():
    cfg = OmegaConf.create({"inner": {"steps": 4}, "stages": [{"steps": "${inner.steps}"}]})
    assert omega_conf_to_dataclass(cfg, Outer).stages[0].steps == 4


def test_unknown_key_is_named_with_its_dotted_path():
    with pytest.raises(TypeError, match=r"inner\.lrr"):
        omega_conf_to_dataclass(OmegaConf.create({"inner": {"lrr": 1.0}}), Outer)
    with pytest.raises(TypeError, match=r"stages\[1\]\.bogus"):
        omega_conf_to_dataclass(OmegaConf.create({"stages": [{}, {"bogus": 1}]}), Outer)


def test_wrong_type_is_named():
    with pytest.raises(TypeError, match=r"inner\.steps='ten'.*expected int"):
        omega_conf_to_dataclass(OmegaConf.create({"inner": {"steps": "ten"}}), Outer)
    with pytest.raises(TypeError, match=r"name=\[1\]"):
        omega_conf_to_dataclass(OmegaConf.create({"name": [1]}), Outer)
    with pytest.raises(TypeError, match=r"inner\.steps=True"):  # a bool is not an int here
        omega_conf_to_dataclass({"inner": {"steps": True}}, Outer)


def test_extra_keys_are_kept_when_allowed_and_read_like_fields():
    out = omega_conf_to_dataclass({"inner": {"lr": 1.0, "warmup": 5}, "recipe_key": {"a": 1}}, Outer, allow_extra=True)
    assert out.recipe_key == {"a": 1} and out["recipe_key"] == {"a": 1} and "recipe_key" in out
    assert out.inner.warmup == 5 and out.inner.get("warmup") == 5 and out.inner.get("absent", 7) == 7
    assert out.to_dict()["inner"] == {"lr": 1.0, "steps": 10, "warmup": 5}
    assert sorted(out.inner) == ["lr", "steps", "warmup"] and dict(**out.inner)["warmup"] == 5
    with pytest.raises(AttributeError, match="no key 'absent'"):
        _ = out.inner.absent


def test_a_typed_section_passes_through_and_round_trips():
    out = omega_conf_to_dataclass({"inner": {"lr": 0.1}}, Outer)
    assert omega_conf_to_dataclass(out, Outer) is out
    again = omega_conf_to_dataclass(out.to_dict(), Outer)
    assert again == out
