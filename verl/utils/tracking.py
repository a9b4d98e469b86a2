"""Experiment tracking: one `Tracking` object fans metrics out to the configured backends.

Each backend is a small adapter with `log(data, step)` and `finish()`. Third-party packages are
imported only when their backend is requested; a missing package fails at construction with the
pip command that installs it, before any training time is spent. Every backend can run without a
network: wandb falls back to offline mode, swanlab to offline mode, mlflow writes a local sqlite
store and tensorboard writes event files.
"""

from __future__ import annotations

import importlib.util
import json
import logging
import netrc
import numbers
import os
import re
import socket
from collections.abc import Iterable
from typing import Any
from urllib.parse import urlparse

from tqdm import tqdm

from verl.utils.logger import concat_dict_to_str

logger = logging.getLogger(__name__)

__all__ = [
    "Tracking",
    "ValidationGenerationsLogger",
    "UnknownBackendError",
    "normalize_backends",
    "sanitize_mlflow_name",
    "SUPPORTED_BACKENDS",
]


class UnknownBackendError(ValueError, AssertionError):
    """A tracking backend name that is not supported (an AssertionError too, as verl raised)."""


# backend name -> (python module that must be importable, pip package that provides it)
_REQUIREMENTS: dict[str, tuple[str | None, str | None]] = {
    "console": (None, None),
    "tensorboard": ("tensorboard", "tensorboard"),
    "wandb": ("wandb", "wandb"),
    "mlflow": ("mlflow", "mlflow"),
    "swanlab": ("swanlab", "swanlab"),
    "clearml": ("clearml", "clearml"),
    "vemlp_wandb": ("volcengine_ml_platform", "volcengine-ml-platform"),
}
SUPPORTED_BACKENDS: tuple[str, ...] = tuple(_REQUIREMENTS)
_ALIASES = {"tracking": "wandb"}  # deprecated name kept for old configs


def normalize_backends(backends: str | Iterable[str] | None, key: str = "trainer.logger") -> list[str]:
    """Turn a backend name or list into a de-duplicated list of supported names.

    Raises UnknownBackendError for an unknown name and ImportError (with the pip command) when a
    backend's package is missing.
    """
    if backends is None:
        return []
    names = [backends] if isinstance(backends, str) else list(backends)
    result: list[str] = []
    for name in names:
        if name in _ALIASES:
            logger.warning("tracking backend %r is deprecated; use %r", name, _ALIASES[name])
            name = _ALIASES[name]
        if name not in _REQUIREMENTS:
            raise UnknownBackendError(
                f"{key}: unknown tracking backend {name!r}; expected some of {list(SUPPORTED_BACKENDS)}"
            )
        module, pip_name = _REQUIREMENTS[name]
        if module is not None and importlib.util.find_spec(module) is None:
            raise ImportError(
                f"{key} includes {name!r} but the {module!r} package is not installed; "
                f"run `pip install {pip_name}` (or `pip install 'verl[trackers]'`) or remove {name!r} from {key}"
            )
        if name not in result:
            result.append(name)
    return result


def _flatten(config: Any, prefix: str = "") -> dict[str, Any]:
    """Nested dicts/lists -> {"a/b/0": value} for backends that take flat parameters."""
    flat: dict[str, Any] = {}
    if isinstance(config, dict):
        items = config.items()
    elif isinstance(config, list | tuple):
        items = enumerate(config)
    else:
        return {prefix: config}
    for k, v in items:
        flat.update(_flatten(v, f"{prefix}/{k}" if prefix else str(k)))
    return flat


def _as_float(value: Any) -> float | None:
    """A metric value as a Python float, or None when it is not a scalar number (strings, tables, lists)."""
    if isinstance(value, bool):
        return float(value)
    if isinstance(value, numbers.Number):
        return float(value)
    if hasattr(value, "item") and getattr(value, "ndim", None) == 0:  # 0-d tensors and numpy scalars
        return float(value.item())
    return None


def _scalars(data: dict) -> dict[str, float]:
    """The scalar-number entries of a metrics dict, as floats (scalar-only backends drop the rest)."""
    out = {}
    for key, value in data.items():
        number = _as_float(value)
        if number is not None:
            out[key] = number
    return out


def _tensorboard_dir(project_name: str, experiment_name: str) -> str:
    return os.environ.get("TENSORBOARD_DIR", os.path.join("tensorboard_log", project_name, experiment_name))


class _ConsoleBackend:
    """Prints each logged dict: every metric (verl's line) or, with ``trainer.console_format=compact`` in the run's
    config, the one-line summary of ``verl.utils.console_line``."""

    def __init__(self, project_name: str, experiment_name: str, config: dict | None):
        trainer = (config or {}).get("trainer") or {}
        self.step_line = None
        if trainer.get("console_format", "full") == "compact":
            from verl.utils.console_line import StepLine

            self.step_line = StepLine(total_steps=trainer.get("total_training_steps"))

    def log(self, data: dict, step: int) -> None:
        line = concat_dict_to_str(data, step=step) if self.step_line is None else self.step_line.format(data, step)
        # tqdm.write keeps a training progress bar intact (it redraws the bar below the line).
        tqdm.write(line)

    def finish(self) -> None:
        pass


# The writer of the live tensorboard backend, so validation text lands in the same event file.
_ACTIVE_TB_WRITER: Any = None


class _TensorboardBackend:
    def __init__(self, project_name: str, experiment_name: str, config: dict | None):
        global _ACTIVE_TB_WRITER
        from torch.utils.tensorboard import SummaryWriter

        self.log_dir = _tensorboard_dir(project_name, experiment_name)
        os.makedirs(self.log_dir, exist_ok=True)
        self.writer = SummaryWriter(self.log_dir)
        _ACTIVE_TB_WRITER = self.writer

    def log(self, data: dict, step: int) -> None:
        for key, value in _scalars(data).items():
            self.writer.add_scalar(key, value, step)
        self.writer.flush()

    def finish(self) -> None:
        global _ACTIVE_TB_WRITER
        self.writer.close()
        if _ACTIVE_TB_WRITER is self.writer:
            _ACTIVE_TB_WRITER = None


def _wandb_has_credentials() -> bool:
    if os.environ.get("WANDB_API_KEY"):
        return True
    try:
        host = urlparse(os.environ.get("WANDB_BASE_URL", "https://api.wandb.ai")).hostname
        return netrc.netrc().authenticators(host) is not None
    except (OSError, netrc.NetrcParseError):
        return False


def _host_reachable(url: str, timeout: float = 2.0) -> bool:
    parsed = urlparse(url)
    port = parsed.port or (443 if parsed.scheme == "https" else 80)
    try:
        with socket.create_connection((parsed.hostname, port), timeout=timeout):
            return True
    except OSError:
        return False


def wandb_mode() -> str:
    """`WANDB_MODE` if set; else "online" with credentials and a reachable server, otherwise "offline"."""
    mode = os.environ.get("WANDB_MODE")
    if mode:
        return mode
    if not _wandb_has_credentials():
        logger.warning("wandb: no WANDB_API_KEY and no `wandb login`; logging offline (upload later: `wandb sync`)")
        return "offline"
    base_url = os.environ.get("WANDB_BASE_URL", "https://api.wandb.ai")
    if not _host_reachable(base_url):
        logger.warning("wandb: %s is not reachable; logging offline (upload later: `wandb sync`)", base_url)
        return "offline"
    return "online"


class _WandbBackend:
    def __init__(self, project_name: str, experiment_name: str, config: dict | None):
        import wandb

        self.wandb = wandb
        # Decide the mode up front: wandb.init would otherwise retry the network for minutes on a cut-off node.
        self.run = wandb.init(project=project_name, name=experiment_name, config=config, mode=wandb_mode())

    def log(self, data: dict, step: int) -> None:
        self.wandb.log(data=data, step=step)

    def finish(self) -> None:
        self.wandb.finish(exit_code=0)


class _VemlpWandbBackend(_WandbBackend):
    def __init__(self, project_name: str, experiment_name: str, config: dict | None):
        import volcengine_ml_platform
        from volcengine_ml_platform import wandb as vemlp_wandb

        volcengine_ml_platform.init(
            ak=os.environ["VOLC_ACCESS_KEY_ID"],
            sk=os.environ["VOLC_SECRET_ACCESS_KEY"],
            region=os.environ["MLP_TRACKING_REGION"],
        )
        self.wandb = vemlp_wandb
        self.run = vemlp_wandb.init(project=project_name, name=experiment_name, config=config, sync_tensorboard=True)


_MLFLOW_BAD_CHARS = re.compile(r"[^0-9A-Za-z_\-. /:]")
_MLFLOW_PARAM_MAX = 6000  # mlflow rejects longer parameter values


def sanitize_mlflow_name(name: str) -> str:
    """A metric/param name mlflow accepts: '@' -> '_at_' ('val/acc@8' -> 'val/acc_at_8'), other invalid chars -> '_'."""
    return _MLFLOW_BAD_CHARS.sub("_", name.replace("@", "_at_"))


def _default_mlflow_uri() -> str:
    # mlflow 3 refuses the plain file store unless MLFLOW_ALLOW_FILE_STORE is set; sqlite needs no server.
    return "sqlite:///" + os.path.abspath("mlruns.db")


class _MlflowBackend:
    def __init__(self, project_name: str, experiment_name: str, config: dict | None):
        import mlflow

        self.mlflow = mlflow
        self.tracking_uri = os.environ.get("MLFLOW_TRACKING_URI") or _default_mlflow_uri()
        mlflow.set_tracking_uri(self.tracking_uri)
        experiment = mlflow.get_experiment_by_name(project_name)
        experiment_id = experiment.experiment_id if experiment else mlflow.create_experiment(project_name)
        self.run = mlflow.start_run(experiment_id=experiment_id, run_name=experiment_name)
        if config:
            params = {sanitize_mlflow_name(k): str(v)[:_MLFLOW_PARAM_MAX] for k, v in _flatten(config).items()}
            mlflow.log_params(params)

    def log(self, data: dict, step: int) -> None:
        metrics: dict[str, float] = {}
        for key, value in _scalars(data).items():
            name = sanitize_mlflow_name(key)
            if name in metrics and name != key:
                logger.warning("mlflow: metric %r collides with another after sanitising to %r", key, name)
            metrics[name] = value
        self.mlflow.log_metrics(metrics=metrics, step=step)

    def finish(self) -> None:
        self.mlflow.end_run()


def swanlab_mode() -> str:
    """`SWANLAB_MODE` if set ("cloud" read as "online"); else "online" with `SWANLAB_API_KEY`, otherwise "offline"."""
    mode = os.environ.get("SWANLAB_MODE")
    if mode:
        return "online" if mode == "cloud" else mode
    # Without a key swanlab would prompt for one on stdin; offline runs can be uploaded with `swanlab sync`.
    return "online" if os.environ.get("SWANLAB_API_KEY") else "offline"


class _SwanlabBackend:
    def __init__(self, project_name: str, experiment_name: str, config: dict | None):
        import swanlab

        self.swanlab = swanlab
        mode = swanlab_mode()
        api_key = os.environ.get("SWANLAB_API_KEY")
        if api_key and mode == "online":
            swanlab.login(api_key=api_key)
        self.run = swanlab.init(
            project=project_name,
            experiment_name=experiment_name,
            config=config,
            logdir=os.environ.get("SWANLAB_LOG_DIR", "swanlog"),
            mode=mode,
        )

    def log(self, data: dict, step: int) -> None:
        self.swanlab.log(data=data, step=step)

    def finish(self) -> None:
        self.swanlab.finish()


class _ClearmlBackend:
    def __init__(self, project_name: str, experiment_name: str, config: dict | None):
        from clearml import Task

        self.task = Task.init(project_name=project_name, task_name=experiment_name, continue_last_task=True)
        if config:
            self.task.connect_configuration(config, name="Hyperparameters")
        self.clearml_logger = self.task.get_logger()

    def log(self, data: dict, step: int) -> None:
        for key, value in _scalars(data).items():
            title, _, series = key.partition("/")
            self.clearml_logger.report_scalar(title=title, series=series or title, value=value, iteration=step)

    def finish(self) -> None:
        self.task.close()


_ADAPTERS = {
    "console": _ConsoleBackend,
    "tensorboard": _TensorboardBackend,
    "wandb": _WandbBackend,
    "vemlp_wandb": _VemlpWandbBackend,
    "mlflow": _MlflowBackend,
    "swanlab": _SwanlabBackend,
    "clearml": _ClearmlBackend,
}


class Tracking:
    """Log metric dicts to every configured backend (console, tensorboard, wandb, mlflow, swanlab, clearml, ...)."""

    supported_backend = list(SUPPORTED_BACKENDS) + list(_ALIASES)

    def __init__(
        self,
        project_name: str,
        experiment_name: str,
        default_backend: str | list[str] = "console",
        config: dict | None = None,
    ):
        self.project_name = project_name
        self.experiment_name = experiment_name
        self.logger: dict[str, Any] = {}
        # Check every name and package before starting any backend, so nothing is left half-open.
        names = normalize_backends(default_backend)
        try:
            for name in names:
                self.logger[name] = _ADAPTERS[name](project_name, experiment_name, config)
        except BaseException:
            self.finish()
            raise

    def log(self, data: dict, step: int, backend: str | list[str] | None = None) -> None:
        """Send `data` at `step` to all backends, or only to those named in `backend`."""
        wanted = None if backend is None else ({backend} if isinstance(backend, str) else set(backend))
        for name, adapter in self.logger.items():
            if wanted is None or name in wanted:
                adapter.log(data=data, step=step)

    def finish(self) -> None:
        """Close every backend (idempotent)."""
        adapters, self.logger = self.logger, {}
        for adapter in adapters.values():
            try:
                adapter.finish()
            except Exception as exc:  # noqa: BLE001 - closing one backend must not stop the others
                logger.warning("closing tracking backend failed: %s", exc)

    def __del__(self):
        try:
            self.finish()
        except Exception:  # noqa: BLE001 - interpreter shutdown may have torn modules down
            pass


def _json_default(value: Any) -> Any:
    number = _as_float(value)
    if number is not None:
        return number
    if hasattr(value, "tolist"):
        return value.tolist()
    return str(value)


class ValidationGenerationsLogger:
    """Log validation samples `(input, output, score)` as a table/text to the backends that support it.

    wandb: table `val/generations` (columns `step, input_1, output_1, score_1, ...`, one row per call);
    swanlab: one `swanlab.Text` per sample under `val/generations`; mlflow: artifact
    `val_generations/step_{step}.json`; tensorboard: markdown text `val/generations`. Each backend
    writes into the run that `Tracking` opened; a backend with no open run is skipped with a warning.
    """

    def __init__(self, project_name: str | None = None, experiment_name: str | None = None):
        self.project_name = project_name
        self.experiment_name = experiment_name
        self._wandb_rows: list[list] = []
        self._tb_writer = None

    def log(self, loggers: str | list[str], samples: list[tuple], step: int) -> None:
        """Send `samples` (list of (input, output, score)) logged at `step` to each named backend."""
        names = [loggers] if isinstance(loggers, str) else list(loggers)
        names = [_ALIASES.get(n, n) for n in names]
        samples = [tuple(s) for s in samples]
        for sample in samples:
            if len(sample) != 3:
                raise ValueError(f"samples: expected (input, output, score) tuples, got {sample!r}")
        for name, method in (
            ("wandb", self._log_wandb),
            ("swanlab", self._log_swanlab),
            ("mlflow", self._log_mlflow),
            ("clearml", self._log_clearml),
            ("tensorboard", self._log_tensorboard),
        ):
            if name in names:
                method(samples, step)

    def _log_wandb(self, samples: list[tuple], step: int) -> None:
        import wandb

        if wandb.run is None:
            logger.warning("val generations: no active wandb run (is 'wandb' in trainer.logger?); skipped")
            return
        columns = ["step"] + [f"{kind}_{i + 1}" for i in range(len(samples)) for kind in ("input", "output", "score")]
        row = [step] + [value for sample in samples for value in sample]
        # wandb tables are immutable once logged: log a new table holding every row so far.
        self._wandb_rows.append(row)
        table = wandb.Table(columns=columns, data=self._wandb_rows)
        wandb.log({"val/generations": table}, step=step)

    def _log_swanlab(self, samples: list[tuple], step: int) -> None:
        import swanlab

        if hasattr(swanlab, "has_run") and not swanlab.has_run():
            logger.warning("val generations: no active swanlab run (is 'swanlab' in trainer.logger?); skipped")
            return
        texts = [
            swanlab.Text(f"input: {inp}\n\n---\n\noutput: {out}\n\n---\n\nscore: {score}", caption=f"sample {i + 1}")
            for i, (inp, out, score) in enumerate(samples)
        ]
        swanlab.log({"val/generations": texts}, step=step)

    def _log_mlflow(self, samples: list[tuple], step: int) -> None:
        import mlflow

        if mlflow.active_run() is None:
            # mlflow.log_text would silently open a fresh run of its own.
            logger.warning("val generations: no active mlflow run (is 'mlflow' in trainer.logger?); skipped")
            return
        rows = [{"step": step, "input": inp, "output": out, "score": score} for inp, out, score in samples]
        text = json.dumps(rows, ensure_ascii=False, indent=2, default=_json_default)
        mlflow.log_text(text, artifact_file=f"val_generations/step_{step}.json")

    def _log_clearml(self, samples: list[tuple], step: int) -> None:
        from clearml import Task

        task = Task.current_task()
        if task is None:
            return
        for i, (inp, out, score) in enumerate(samples):
            task.get_logger().report_text(f"step {step} sample {i + 1}\ninput: {inp}\noutput: {out}\nscore: {score}")

    def _log_tensorboard(self, samples: list[tuple], step: int) -> None:
        writer = _ACTIVE_TB_WRITER
        if writer is None:
            if self._tb_writer is None:
                from torch.utils.tensorboard import SummaryWriter

                log_dir = _tensorboard_dir(self.project_name or "verl", self.experiment_name or "default")
                self._tb_writer = SummaryWriter(log_dir)
            writer = self._tb_writer
        text = "\n\n".join(
            f"**sample {i + 1}** (score {score})\n\ninput: {inp}\n\noutput: {out}"
            for i, (inp, out, score) in enumerate(samples)
        )
        writer.add_text("val/generations", text, step)
        writer.flush()
