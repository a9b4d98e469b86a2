"""Real tracking backends, offline: each writes three steps, then the test reads back what landed on disk.

Skipped per backend when its package is missing (core CI); the `trackers` extra installs all four.
"""

import glob
import json
import os
import struct
import time

import pytest

from verl.utils.tracking import Tracking, ValidationGenerationsLogger

STEPS = {1: {"actor/pg_loss": 0.25, "val-core/gsm8k/acc@2": 0.5}, 2: {"actor/pg_loss": -1.5}, 3: {"actor/pg_loss": 3.0}}
SAMPLES = [("question one", "answer one", 1.0), ("question two", "answer two", 0.0)]


@pytest.fixture
def in_tmp(tmp_path, monkeypatch):
    """Run in an empty directory with no tracker settings inherited from the machine."""
    monkeypatch.chdir(tmp_path)
    for var in ("TENSORBOARD_DIR", "WANDB_MODE", "WANDB_DIR", "MLFLOW_TRACKING_URI", "SWANLAB_MODE", "SWANLAB_LOG_DIR"):
        monkeypatch.delenv(var, raising=False)
    return tmp_path


def _log_three_steps(backend: str, with_generations: bool = True) -> None:
    tracker = Tracking("proj", "exp", default_backend=backend, config={"trainer": {"lr": 1e-6, "logger": [backend]}})
    try:
        for step, metrics in STEPS.items():
            # a string value must be dropped by scalar-only backends, not crash them
            tracker.log({**metrics, "note": "text"}, step=step)
        if with_generations:
            ValidationGenerationsLogger("proj", "exp").log([backend], SAMPLES, step=3)
    finally:
        tracker.finish()


def test_tensorboard_event_files_read_back(in_tmp, monkeypatch):
    pytest.importorskip("tensorboard", reason="tensorboard not installed (pip install tensorboard)")
    from tensorboard.backend.event_processing import event_accumulator

    log_dir = in_tmp / "tb"
    monkeypatch.setenv("TENSORBOARD_DIR", str(log_dir))
    _log_three_steps("tensorboard")
    assert len(glob.glob(str(log_dir / "events.out.tfevents.*"))) == 1  # val text shares the metrics writer
    acc = event_accumulator.EventAccumulator(str(log_dir), size_guidance={event_accumulator.TENSORS: 0})
    acc.Reload()
    loss = [(e.step, e.value) for e in acc.Scalars("actor/pg_loss")]
    assert loss == [(1, 0.25), (2, -1.5), (3, 3.0)]
    assert [(e.step, e.value) for e in acc.Scalars("val-core/gsm8k/acc@2")] == [(1, 0.5)]
    assert "note" not in acc.Tags()["scalars"]
    (text_event,) = acc.Tensors("val/generations/text_summary")
    text = text_event.tensor_proto.string_val[0].decode()
    assert text_event.step == 3 and "question two" in text and "answer one" in text and "score 1.0" in text


def test_tensorboard_default_dir_is_project_experiment(in_tmp):
    pytest.importorskip("tensorboard", reason="tensorboard not installed (pip install tensorboard)")
    _log_three_steps("tensorboard", with_generations=False)
    assert glob.glob(str(in_tmp / "tensorboard_log" / "proj" / "exp" / "events.out.tfevents.*"))


def _read_leveldb_log(path: str, ident: bytes) -> list[bytes]:
    """Records of a LevelDB-log-format file (wandb's `.wandb`): 7-byte file header, 32 KiB blocks."""
    data = open(path, "rb").read()
    assert data[:4] == ident, data[:7]
    block, pos, pending, records = 32768, 7, b"", []
    while pos + 7 <= len(data):
        if block - pos % block < 7:  # block trailer padding
            pos += block - pos % block
            continue
        _crc, length, kind = struct.unpack("<IHB", data[pos : pos + 7])
        if pos + 7 + length > len(data):  # the writer's buffer is not all on disk yet
            break
        chunk = data[pos + 7 : pos + 7 + length]
        pos += 7 + length
        if kind == 0:
            continue
        pending += chunk
        if kind in (1, 4):  # FULL or LAST
            records.append(pending)
            pending = b""
    return records


def _wandb_records_through_exit(run_file: str, pb2, timeout_s: float = 30.0) -> list:
    """The run file's records, read again until its `exit` record is there.

    wandb.finish() returns once the run has exited, but the transaction log is written by the separate
    wandb-core process; on a loaded host the read can come before its last write is visible.
    """
    from google.protobuf.message import DecodeError

    deadline = time.monotonic() + timeout_s
    while True:
        records = []
        for raw in _read_leveldb_log(run_file, b":W&B"):
            record = pb2.Record()
            try:
                record.ParseFromString(raw)
            except DecodeError:  # a record cut at the end of what is on disk so far
                break
            records.append(record)
        if any(r.WhichOneof("record_type") == "exit" for r in records) or time.monotonic() > deadline:
            return records
        time.sleep(0.2)


def _wandb_internal_log(run_file: str) -> str:
    """The tail of wandb-core's own log for this run, to explain a failure."""
    path = os.path.join(os.path.dirname(run_file), "logs", "debug-internal.log")
    if not os.path.exists(path):
        return f"(no {path})"
    return "debug-internal.log tail:\n" + "".join(open(path).readlines()[-40:])


def test_wandb_offline_run_read_back(in_tmp, monkeypatch):
    pytest.importorskip("wandb", reason="wandb not installed (pip install wandb)")
    from wandb.proto import wandb_internal_pb2

    monkeypatch.setenv("WANDB_DIR", str(in_tmp))
    monkeypatch.setenv("WANDB_SILENT", "true")
    monkeypatch.delenv("WANDB_API_KEY", raising=False)
    monkeypatch.setenv("NETRC", str(in_tmp / "no-netrc"))
    _log_three_steps("wandb")  # no key -> offline, without touching the network
    (run_file,) = glob.glob(str(in_tmp / "wandb" / "offline-run-*" / "run-*.wandb"))
    records = _wandb_records_through_exit(run_file, wandb_internal_pb2)
    history = {}
    config = None
    for record in records:
        kind = record.WhichOneof("record_type")
        if kind == "history":
            items = {item.key or "/".join(item.nested_key): json.loads(item.value_json) for item in record.history.item}
            history.setdefault(record.history.step.num, {}).update(items)
        elif kind == "run":
            config = {item.key: json.loads(item.value_json) for item in record.run.config.update}
    kinds = [r.WhichOneof("record_type") for r in records]
    why = f"history steps {sorted(history)}; records {kinds}; {_wandb_internal_log(run_file)}"
    assert sorted(history) == [1, 2, 3], why
    assert [history[s]["actor/pg_loss"] for s in (1, 2, 3)] == [0.25, -1.5, 3.0]
    assert history[1]["val-core/gsm8k/acc@2"] == 0.5
    assert config["trainer"] == {"lr": 1e-6, "logger": ["wandb"]}
    assert history[3]["val/generations/_type"] == "table-file"
    table = json.load(open(os.path.join(os.path.dirname(run_file), "files", history[3]["val/generations/path"])))
    assert table["columns"] == ["step", "input_1", "output_1", "score_1", "input_2", "output_2", "score_2"]
    assert table["data"] == [[3, "question one", "answer one", 1.0, "question two", "answer two", 0.0]]


def test_mlflow_sqlite_store_read_back(in_tmp):
    pytest.importorskip("mlflow", reason="mlflow not installed (pip install mlflow)")
    from mlflow.tracking import MlflowClient

    _log_three_steps("mlflow")  # default store: sqlite mlruns.db in the working directory
    uri = "sqlite:///" + str(in_tmp / "mlruns.db")
    client = MlflowClient(uri)
    (run,) = client.search_runs([client.get_experiment_by_name("proj").experiment_id])
    assert run.data.tags["mlflow.runName"] == "exp"
    assert run.data.params["trainer/lr"] == "1e-06" and run.data.params["trainer/logger/0"] == "mlflow"
    history = client.get_metric_history(run.info.run_id, "actor/pg_loss")
    assert [(m.step, m.value) for m in history] == [(1, 0.25), (2, -1.5), (3, 3.0)]
    # '@' is not allowed in mlflow names: logged under the sanitised name
    assert [(m.step, m.value) for m in client.get_metric_history(run.info.run_id, "val-core/gsm8k/acc_at_2")] == [
        (1, 0.5)
    ]
    assert "note" not in run.data.metrics
    local = client.download_artifacts(run.info.run_id, "val_generations/step_3.json", str(in_tmp))
    rows = json.load(open(local))
    assert rows == [
        {"step": 3, "input": "question one", "output": "answer one", "score": 1.0},
        {"step": 3, "input": "question two", "output": "answer two", "score": 0.0},
    ]


def test_swanlab_offline_run_read_back(in_tmp, monkeypatch):
    pytest.importorskip("swanlab", reason="swanlab not installed (pip install swanlab)")
    reader_mod = pytest.importorskip(
        "swanlab.sdk.internal.core_python.store", reason="this swanlab version has no local run reader"
    )
    from swanlab.proto.swanlab.record.v1.record_pb2 import Record

    monkeypatch.delenv("SWANLAB_API_KEY", raising=False)
    monkeypatch.setenv("SWANLAB_LOG_DIR", str(in_tmp / "swanlog"))
    _log_three_steps("swanlab")  # no key -> offline
    (run_file,) = glob.glob(str(in_tmp / "swanlog" / "run-*" / "run-*.swanlab"))
    reader = reader_mod.DataStoreReader()
    reader.open(run_file)
    scalars, media, start = {}, {}, None
    for raw in reader:
        record = Record()
        record.ParseFromString(raw)
        if record.HasField("scalar"):
            scalars[(record.scalar.key, record.scalar.step)] = record.scalar.value.number
        elif record.HasField("media"):
            media[(record.media.key, record.media.step)] = [item.filename for item in record.media.value.items]
        elif record.HasField("start"):
            start = record.start
    reader.close()
    assert (start.project, start.name) == ("proj", "exp")
    assert [scalars[("actor/pg_loss", s)] for s in (1, 2, 3)] == [0.25, -1.5, 3.0]
    assert scalars[("val-core/gsm8k/acc@2", 1)] == 0.5
    files = media[("val/generations", 3)]
    texts = [open(glob.glob(str(in_tmp / "swanlog" / "run-*" / "media" / "text" / name))[0]).read() for name in files]
    assert len(texts) == 2 and "question one" in texts[0] and "answer two" in texts[1] and "score: 0.0" in texts[1]
