"""Tests for verl.utils.tracking: console format, backend selection and the adapter contract."""

import importlib.machinery
import sys
import types

import pytest

from verl.utils.logger import LocalLogger, concat_dict_to_str
from verl.utils.tracking import Tracking, UnknownBackendError, ValidationGenerationsLogger, normalize_backends


def test_console_line_format(capsys):
    tracker = Tracking("proj", "exp", default_backend="console")
    tracker.log({"actor/pg_loss": 0.12345, "critic/vf_loss": 2, "note": "text is skipped"}, step=3)
    out = capsys.readouterr().out.strip()
    assert out == "step:3 - actor/pg_loss:0.123 - critic/vf_loss:2.000"


def test_concat_dict_handles_0d_tensors_and_skips_bools():
    import torch

    line = concat_dict_to_str({"a": torch.tensor(1.5), "flag": True, "b": -0.0004}, step=0)
    assert line == "step:0 - a:1.500 - b:-0.000"


def test_local_logger_silent(capsys):
    LocalLogger(print_to_console=False).log({"x": 1.0}, step=1)
    assert capsys.readouterr().out == ""


def test_log_filters_by_backend(capsys):
    tracker = Tracking("p", "e", default_backend=["console"])
    tracker.log({"x": 1.0}, step=1, backend=["wandb"])
    assert capsys.readouterr().out == ""
    tracker.log({"x": 1.0}, step=1, backend="console")
    assert capsys.readouterr().out.strip() == "step:1 - x:1.000"


def test_unknown_backend_names_it():
    with pytest.raises(UnknownBackendError, match="'neptune'"):
        Tracking("p", "e", default_backend=["console", "neptune"])
    # verl raised AssertionError here; the error is both.
    with pytest.raises(AssertionError):
        Tracking("p", "e", default_backend="neptune")


def test_missing_package_gives_pip_command(monkeypatch):
    monkeypatch.setitem(sys.modules, "wandb", None)  # makes find_spec raise/None like an absent package
    monkeypatch.setattr("importlib.util.find_spec", lambda name, *a: None)
    with pytest.raises(ImportError, match="pip install wandb"):
        Tracking("p", "e", default_backend=["console", "wandb"])


def _fake_wandb(calls):
    mod = types.ModuleType("wandb")
    mod.__spec__ = importlib.machinery.ModuleSpec("wandb", None)
    mod.init = lambda **kw: calls.append(("init", kw))
    mod.log = lambda data, step: calls.append(("log", dict(data), step))
    mod.finish = lambda exit_code=0: calls.append(("finish", exit_code))

    class Table:
        def __init__(self, columns, data):
            self.columns, self.data = columns, [list(r) for r in data]

    mod.Table = Table
    return mod


def test_wandb_adapter_contract_and_deprecated_alias(monkeypatch):
    calls = []
    monkeypatch.setitem(sys.modules, "wandb", _fake_wandb(calls))
    assert normalize_backends(["tracking", "console", "wandb"]) == ["wandb", "console"]
    tracker = Tracking("proj", "exp", default_backend=["tracking"], config={"a": 1})
    tracker.log({"m": 1.0}, step=7)
    tracker.finish()
    assert calls == [
        ("init", {"project": "proj", "name": "exp", "config": {"a": 1}}),
        ("log", {"m": 1.0}, 7),
        ("finish", 0),
    ]


def test_validation_generations_table_accumulates_rows(monkeypatch):
    calls = []
    monkeypatch.setitem(sys.modules, "wandb", _fake_wandb(calls))
    vlog = ValidationGenerationsLogger()
    vlog.log(["console", "wandb"], [("q1", "a1", 1.0), ("q2", "a2", 0.0)], step=1)
    vlog.log(["wandb"], [("q1", "b1", 0.5), ("q2", "b2", 0.0)], step=2)
    (_, data, step) = calls[-1]
    table = data["val/generations"]
    assert step == 2
    assert table.columns == ["step", "input_1", "output_1", "score_1", "input_2", "output_2", "score_2"]
    assert table.data == [[1, "q1", "a1", 1.0, "q2", "a2", 0.0], [2, "q1", "b1", 0.5, "q2", "b2", 0.0]]
