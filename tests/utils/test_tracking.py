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
    mod.run = None

    def init(**kw):
        calls.append(("init", kw))
        mod.run = object()
        return mod.run

    mod.init = init
    mod.log = lambda data, step: calls.append(("log", dict(data), step))
    mod.finish = lambda exit_code=0: calls.append(("finish", exit_code))

    class Table:
        def __init__(self, columns, data):
            self.columns, self.data = columns, [list(r) for r in data]

    mod.Table = Table
    return mod


def test_wandb_adapter_contract_and_deprecated_alias(monkeypatch):
    calls = []
    monkeypatch.setenv("WANDB_MODE", "offline")
    monkeypatch.setitem(sys.modules, "wandb", _fake_wandb(calls))
    assert normalize_backends(["tracking", "console", "wandb"]) == ["wandb", "console"]
    tracker = Tracking("proj", "exp", default_backend=["tracking"], config={"a": 1})
    tracker.log({"m": 1.0}, step=7)
    tracker.finish()
    assert calls == [
        ("init", {"project": "proj", "name": "exp", "config": {"a": 1}, "mode": "offline"}),
        ("log", {"m": 1.0}, 7),
        ("finish", 0),
    ]


def test_validation_generations_table_accumulates_rows(monkeypatch):
    calls = []
    monkeypatch.setitem(sys.modules, "wandb", _fake_wandb(calls))
    sys.modules["wandb"].run = object()  # an open run, as Tracking would have started
    vlog = ValidationGenerationsLogger()
    vlog.log(["console", "wandb"], [("q1", "a1", 1.0), ("q2", "a2", 0.0)], step=1)
    vlog.log(["wandb"], [("q1", "b1", 0.5), ("q2", "b2", 0.0)], step=2)
    (_, data, step) = calls[-1]
    table = data["val/generations"]
    assert step == 2
    assert table.columns == ["step", "input_1", "output_1", "score_1", "input_2", "output_2", "score_2"]
    assert table.data == [[1, "q1", "a1", 1.0, "q2", "a2", 0.0], [2, "q1", "b1", 0.5, "q2", "b2", 0.0]]


def test_wandb_mode_without_credentials_is_offline(monkeypatch, tmp_path):
    from verl.utils import tracking

    monkeypatch.delenv("WANDB_MODE", raising=False)
    monkeypatch.delenv("WANDB_API_KEY", raising=False)
    monkeypatch.setenv("HOME", str(tmp_path))  # no ~/.netrc
    monkeypatch.setenv("NETRC", str(tmp_path / "absent"))
    assert tracking.wandb_mode() == "offline"
    monkeypatch.setenv("WANDB_MODE", "disabled")
    assert tracking.wandb_mode() == "disabled"


def test_wandb_mode_unreachable_server_is_offline(monkeypatch):
    from verl.utils import tracking

    monkeypatch.delenv("WANDB_MODE", raising=False)
    monkeypatch.setenv("WANDB_API_KEY", "x" * 40)
    # port 9 on localhost: nothing listens there, the connection is refused at once (no network needed).
    monkeypatch.setenv("WANDB_BASE_URL", "http://127.0.0.1:9")
    assert tracking.wandb_mode() == "offline"


def test_swanlab_mode(monkeypatch):
    from verl.utils import tracking

    monkeypatch.delenv("SWANLAB_MODE", raising=False)
    monkeypatch.delenv("SWANLAB_API_KEY", raising=False)
    assert tracking.swanlab_mode() == "offline"
    monkeypatch.setenv("SWANLAB_API_KEY", "k")
    assert tracking.swanlab_mode() == "online"
    monkeypatch.setenv("SWANLAB_MODE", "cloud")  # the old name for online
    assert tracking.swanlab_mode() == "online"
    monkeypatch.setenv("SWANLAB_MODE", "local")
    assert tracking.swanlab_mode() == "local"


def test_mlflow_names_are_sanitised():
    from verl.utils.tracking import sanitize_mlflow_name

    assert (
        sanitize_mlflow_name("val-core/openai/gsm8k/reward/best@4/mean")
        == "val-core/openai/gsm8k/reward/best_at_4/mean"
    )
    assert sanitize_mlflow_name("a(b)=c") == "a_b__c"
    assert sanitize_mlflow_name("timing_s/step") == "timing_s/step"


def test_console_lines_do_not_break_a_progress_bar(capsys):
    from tqdm import tqdm

    bar = tqdm(total=3, file=__import__("sys").stderr)
    Tracking("p", "e", default_backend="console").log({"x": 2.0}, step=1)
    bar.close()
    assert capsys.readouterr().out.strip() == "step:1 - x:2.000"


def test_val_logger_rejects_malformed_samples():
    with pytest.raises(ValueError, match="input, output, score"):
        ValidationGenerationsLogger().log(["console"], [("only", "two")], step=1)


def test_failed_backend_start_closes_the_started_ones(monkeypatch):
    from verl.utils import tracking

    closed = []

    class Ok:
        def __init__(self, *a):
            pass

        def log(self, data, step):
            pass

        def finish(self):
            closed.append("ok")

    class Boom:
        def __init__(self, *a):
            raise RuntimeError("cannot start")

    monkeypatch.setitem(tracking._ADAPTERS, "console", Ok)
    monkeypatch.setitem(tracking._ADAPTERS, "tensorboard", Boom)
    monkeypatch.setattr("importlib.util.find_spec", lambda name, *a: object())
    with pytest.raises(RuntimeError, match="cannot start"):
        Tracking("p", "e", default_backend=["console", "tensorboard"])
    assert closed == ["ok"]
