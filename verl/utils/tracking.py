"""Experiment tracking: one `Tracking` object fans metrics out to the configured backends.

Each backend is a small adapter with `log(data, step)` and `finish()`. Third-party packages are
imported only when their backend is requested; a missing package fails at construction with the
pip command that installs it, before any training time is spent.
"""

from __future__ import annotations

import importlib.util
import json
import logging
import os
import re
from collections.abc import Iterable
from typing import Any

from verl.utils.logger import LocalLogger

logger = logging.getLogger(__name__)

__all__ = ["Tracking", "ValidationGenerationsLogger", "UnknownBackendError", "normalize_backends", "SUPPORTED_BACKENDS"]


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
                f"run `pip install {pip_name}` or remove {name!r} from {key}"
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


class _ConsoleBackend:
    def __init__(self, project_name: str, experiment_name: str, config: dict | None):
        self._logger = LocalLogger(print_to_console=True)

    def log(self, data: dict, step: int) -> None:
        self._logger.log(data=data, step=step)

    def finish(self) -> None:
        pass


class _TensorboardBackend:
    def __init__(self, project_name: str, experiment_name: str, config: dict | None):
        from torch.utils.tensorboard import SummaryWriter

        log_dir = os.environ.get("TENSORBOARD_DIR", os.path.join("tensorboard_log", project_name, experiment_name))
        os.makedirs(log_dir, exist_ok=True)
        self.writer = SummaryWriter(log_dir)

    def log(self, data: dict, step: int) -> None:
        for key, value in data.items():
            self.writer.add_scalar(key, value, step)

    def finish(self) -> None:
        self.writer.close()


class _WandbBackend:
    def __init__(self, project_name: str, experiment_name: str, config: dict | None):
        import wandb

        self.wandb = wandb
        wandb.init(project=project_name, name=experiment_name, config=config)

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
        vemlp_wandb.init(project=project_name, name=experiment_name, config=config, sync_tensorboard=True)


_MLFLOW_BAD_CHARS = re.compile(r"[^0-9A-Za-z_\-. /]")


class _MlflowBackend:
    def __init__(self, project_name: str, experiment_name: str, config: dict | None):
        import mlflow

        self.mlflow = mlflow
        mlflow.set_tracking_uri(os.environ.get("MLFLOW_TRACKING_URI", "sqlite:////tmp/mlruns.db"))
        experiment = mlflow.get_experiment_by_name(project_name) or mlflow.get_experiment(
            mlflow.create_experiment(project_name)
        )
        mlflow.start_run(experiment_id=experiment.experiment_id, run_name=experiment_name)
        if config:
            mlflow.log_params(_flatten(config))

    def log(self, data: dict, step: int) -> None:
        # mlflow rejects metric names with characters such as '@' (e.g. "val/acc@8").
        metrics = {_MLFLOW_BAD_CHARS.sub("_", k): v for k, v in data.items()}
        self.mlflow.log_metrics(metrics=metrics, step=step)

    def finish(self) -> None:
        self.mlflow.end_run()


class _SwanlabBackend:
    def __init__(self, project_name: str, experiment_name: str, config: dict | None):
        import swanlab

        self.swanlab = swanlab
        api_key = os.environ.get("SWANLAB_API_KEY")
        if api_key:
            swanlab.login(api_key)
        swanlab.init(
            project=project_name,
            experiment_name=experiment_name,
            config=config,
            logdir=os.environ.get("SWANLAB_LOG_DIR", "swanlog"),
            mode=os.environ.get("SWANLAB_MODE", "cloud"),
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
        for key, value in data.items():
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
        for name in normalize_backends(default_backend):
            self.logger[name] = _ADAPTERS[name](project_name, experiment_name, config)

    def log(self, data: dict, step: int, backend: str | list[str] | None = None) -> None:
        """Send `data` at `step` to all backends, or only to those named in `backend`."""
        wanted = None if backend is None else ({backend} if isinstance(backend, str) else set(backend))
        for name, adapter in self.logger.items():
            if wanted is None or name in wanted:
                adapter.log(data=data, step=step)

    def finish(self) -> None:
        """Close every backend (idempotent)."""
        for adapter in self.logger.values():
            try:
                adapter.finish()
            except Exception as exc:  # noqa: BLE001 - closing one backend must not stop the others
                logger.warning("closing tracking backend failed: %s", exc)
        self.logger = {}

    def __del__(self):
        try:
            self.finish()
        except Exception:  # noqa: BLE001 - interpreter shutdown may have torn modules down
            pass


class ValidationGenerationsLogger:
    """Log validation samples `(input, output, score)` as a table/text to the backends that support it."""

    def __init__(self, project_name: str | None = None, experiment_name: str | None = None):
        self.project_name = project_name
        self.experiment_name = experiment_name
        self._wandb_rows: list[list] = []
        self._tb_writer = None

    def log(self, loggers: str | list[str], samples: list[tuple], step: int) -> None:
        """Send `samples` (list of (input, output, score)) logged at `step` to each named backend."""
        names = [loggers] if isinstance(loggers, str) else list(loggers)
        names = [_ALIASES.get(n, n) for n in names]
        if "wandb" in names:
            self._log_wandb(samples, step)
        if "swanlab" in names:
            self._log_swanlab(samples, step)
        if "mlflow" in names:
            self._log_mlflow(samples, step)
        if "clearml" in names:
            self._log_clearml(samples, step)
        if "tensorboard" in names:
            self._log_tensorboard(samples, step)

    def _log_wandb(self, samples: list[tuple], step: int) -> None:
        import wandb

        columns = ["step"] + [f"{kind}_{i + 1}" for i in range(len(samples)) for kind in ("input", "output", "score")]
        row = [step] + [value for sample in samples for value in sample]
        # wandb tables are immutable once logged: log a new table holding every row so far.
        self._wandb_rows.append(row)
        table = wandb.Table(columns=columns, data=self._wandb_rows)
        wandb.log({"val/generations": table}, step=step)

    def _log_swanlab(self, samples: list[tuple], step: int) -> None:
        import swanlab

        texts = [
            swanlab.Text(f"input: {inp}\n\n---\n\noutput: {out}\n\n---\n\nscore: {score}", caption=f"sample {i + 1}")
            for i, (inp, out, score) in enumerate(samples)
        ]
        swanlab.log({"val/generations": texts}, step=step)

    def _log_mlflow(self, samples: list[tuple], step: int) -> None:
        import mlflow

        rows = [{"step": step, "input": inp, "output": out, "score": score} for inp, out, score in samples]
        mlflow.log_text(
            json.dumps(rows, ensure_ascii=False, indent=2), artifact_file=f"val_generations/step_{step}.json"
        )

    def _log_clearml(self, samples: list[tuple], step: int) -> None:
        from clearml import Task

        task = Task.current_task()
        if task is None:
            return
        for i, (inp, out, score) in enumerate(samples):
            task.get_logger().report_text(f"step {step} sample {i + 1}\ninput: {inp}\noutput: {out}\nscore: {score}")

    def _log_tensorboard(self, samples: list[tuple], step: int) -> None:
        if self._tb_writer is None:
            from torch.utils.tensorboard import SummaryWriter

            project = self.project_name or "verl"
            experiment = self.experiment_name or "default"
            log_dir = os.environ.get("TENSORBOARD_DIR", os.path.join("tensorboard_log", project, experiment))
            self._tb_writer = SummaryWriter(log_dir)
        text = "\n\n".join(
            f"**sample {i + 1}** (score {score})\n\ninput: {inp}\n\noutput: {out}"
            for i, (inp, out, score) in enumerate(samples)
        )
        self._tb_writer.add_text("val/generations", text, step)
        self._tb_writer.flush()
