"""Checks of the PPO data files (``data.train_files`` / ``data.val_files``), run before Ray starts.

Each local file must be readable parquet, hold at least one row, and have every column the run will read: the
prompts (``data.prompt_key``), and for the built-in rule reward the ``reward_model`` struct with ``ground_truth``
and the ``data.reward_fn_key`` column. Only the parquet footer (schema and row count) is read, never the rows. A
column the run does not read is never an error, and files read by a ``data.custom_cls`` dataset are not checked.
Whether rows survive ``data.filter_overlong_prompts`` needs the tokenizer and every prompt, so the dataset checks
it when it loads (``main_ppo`` builds the datasets before it starts Ray).

``parquet_schema`` and ``parquet_column`` are the one way the driver-side checks open a data file, so a file that is
not parquet is reported the same way by every check.
"""

from __future__ import annotations

import logging
import os

from verl.trainer.config import ConfigError

__all__ = [
    "BUILTIN_RULE_REWARD_MANAGERS",
    "check_data_files",
    "data_file_paths",
    "parquet_column",
    "parquet_schema",
    "uses_custom_dataset",
]

logger = logging.getLogger(__name__)

DATA_KEYS = ("data.train_files", "data.val_files")
# reward managers shipped here; each reads reward_model.ground_truth and the data.reward_fn_key column of every row
BUILTIN_RULE_REWARD_MANAGERS = ("naive", "batch", "dapo", "prime")


def data_file_paths(config, key: str) -> list[str]:
    """The paths under ``key`` (``data.train_files`` or ``data.val_files``) of the typed config, as strings."""
    files = config.data.train_files if key == "data.train_files" else config.data.val_files
    return [str(files)] if isinstance(files, str) else [str(f) for f in (files or [])]


def _local(path: str) -> str | None:
    """The local file of ``path``; None for a remote (hdfs://) or missing one (checked where the files are)."""
    if str(path).startswith("hdfs://"):
        return None
    local = os.path.expanduser(str(path))
    return local if os.path.isfile(local) else None


def parquet_schema(key: str, path: str):
    """``(schema, num_rows)`` of a local parquet file from its footer; None for a remote or missing file.

    A file that pyarrow cannot read as parquet is a ConfigError naming ``key`` and the file.
    """
    local = _local(path)
    if local is None:
        return None
    import pyarrow.parquet as pq

    try:
        metadata = pq.read_metadata(local)
        return metadata.schema.to_arrow_schema(), metadata.num_rows
    except Exception as exc:  # noqa: BLE001 - any reader failure means the file is not usable parquet
        raise ConfigError(
            f"{key}: {path!r} is not a parquet file ({type(exc).__name__}: {exc}); expected a parquet file of "
            "prompts (see examples/data_preprocess)"
        ) from None


def parquet_column(key: str, path: str, column: str) -> list | None:
    """The values of ``column`` in a local parquet file (one None per row where the column is absent); None for a
    remote or missing file (remote files are checked when the dataset loads them)."""
    found = parquet_schema(key, path)
    if found is None:
        return None
    schema, num_rows = found
    if column not in schema.names:
        return [None] * num_rows
    import pyarrow.parquet as pq

    return pq.read_table(os.path.expanduser(path), columns=[column]).column(column).to_pylist()


def _uses_builtin_rule_reward(config) -> bool:
    """True when every row is scored by a shipped reward manager with the default scorer (no custom function, no
    reward model): then each row needs ``reward_model.ground_truth`` and its ``data.reward_fn_key`` column."""
    return (
        not config.custom_reward_function.path
        and not config.reward_model.enable
        and config.reward.reward_manager.source == "register"
        and config.reward_model.reward_manager in BUILTIN_RULE_REWARD_MANAGERS
    )


def _struct_fields(arrow_type) -> list[str] | None:
    """The field names of a struct column; None when the column is not a struct."""
    import pyarrow as pa

    if not pa.types.is_struct(arrow_type):
        return None
    return [arrow_type.field(i).name for i in range(arrow_type.num_fields)]


def _check_one_file(config, key: str, path: str, policy_is_vlm: bool | None) -> None:
    found = parquet_schema(key, path)
    if found is None:
        return
    schema, num_rows = found
    if num_rows == 0:
        raise ConfigError(f"{key}: {path!r} has no rows; expected at least one prompt")
    names = schema.names
    prompt_key = config.data.prompt_key
    if prompt_key not in names:
        raise ConfigError(
            f"{key}: {path!r} has no column {prompt_key!r} (data.prompt_key); expected the chat messages of each "
            f"prompt there (columns: {names})"
        )
    if _uses_builtin_rule_reward(config):
        manager = config.reward_model.reward_manager
        why = f"the rule reward (reward_model.reward_manager={manager!r}, no custom_reward_function) reads it"
        if "reward_model" not in names:
            raise ConfigError(
                f"{key}: {path!r} has no column 'reward_model'; expected a struct with 'ground_truth' per row, since "
                f"{why}; add it, or set custom_reward_function.path / reward_model.enable=True"
            )
        fields = _struct_fields(schema.field("reward_model").type)
        if fields is not None and "ground_truth" not in fields:
            raise ConfigError(
                f"{key}: {path!r} column 'reward_model' has fields {fields} but no 'ground_truth'; expected "
                f"reward_model.ground_truth, since {why}"
            )
        fn_key = config.data.reward_fn_key
        if fn_key not in names:
            raise ConfigError(
                f"{key}: {path!r} has no column {fn_key!r} (data.reward_fn_key); expected the data source of each "
                f"row, since {why} to pick the scorer"
            )
    if policy_is_vlm and config.data.image_key not in names and config.data.video_key not in names:
        logger.warning(
            "%s: %r has no %r (data.image_key) or %r (data.video_key) column; the vision-language policy trains on "
            "its prompts as text only",
            key,
            path,
            config.data.image_key,
            config.data.video_key,
        )


def uses_custom_dataset(config) -> bool:
    """True when ``data.custom_cls`` names the dataset class: it reads the files its own way (any format, any
    columns), so they are not checked here."""
    return bool(config.data.custom_cls.path)


def check_data_files(config, policy_is_vlm: bool | None = None) -> None:
    """Raise ConfigError for the first local data file the run could not read (``config``: the typed PPO config;
    ``policy_is_vlm``: whether the policy has a vision tower, None when unknown)."""
    if uses_custom_dataset(config):
        return
    for key in DATA_KEYS:
        for path in data_file_paths(config, key):
            _check_one_file(config, key, path, policy_is_vlm)
