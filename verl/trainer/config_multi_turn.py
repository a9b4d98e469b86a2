"""Config checks of ``actor_rollout_ref.rollout.multi_turn``: everything a multi-turn run needs, before Ray starts.

The tool and interaction files are read and their classes imported here, so a wrong class name or a missing file
fails in seconds in the driver instead of inside every worker after the models are built.
"""

from __future__ import annotations

from verl.utils.batch_sizes import ConfigError

__all__ = ["check_multi_turn"]

_KEY = "actor_rollout_ref.rollout.multi_turn"


def check_multi_turn(config, check_files: bool = True) -> None:
    """Refuse a multi-turn setting the rollout cannot honour (``config``: the typed PPO config).

    ``check_files=False`` (remote paths, unit tests) skips reading the tool and interaction files.
    """
    rollout = config.actor_rollout_ref.rollout
    settings = rollout.multi_turn
    if not settings.enable:
        return
    if rollout.name not in ("hf", "vllm"):
        raise ConfigError(f"{_KEY}.enable=True runs with rollout.name=hf or vllm (got {rollout.name!r})")
    if not (settings.tool_config_path or settings.interaction_config_path):
        raise ConfigError(f"{_KEY}.enable=True needs {_KEY}.tool_config_path or {_KEY}.interaction_config_path")
    estimator = config.algorithm.adv_estimator
    if estimator != "grpo":
        raise ConfigError(f"{_KEY}.enable=True supports algorithm.adv_estimator='grpo' only (got {estimator!r})")
    if not config.data.return_raw_chat:
        raise ConfigError(
            f"{_KEY}.enable=True needs data.return_raw_chat=True (the rollout re-templates each prompt's messages "
            "with the tool schemas)"
        )
    from verl.workers.rollout.multi_turn.tool_parser import registered_tool_parsers

    if settings.format not in registered_tool_parsers():
        raise ConfigError(
            f"{_KEY}.format={settings.format!r} is not a registered tool-call parser; "
            f"choose from {registered_tool_parsers()}"
        )
    if settings.use_inference_chat_template:
        raise ConfigError(
            f"{_KEY}.use_inference_chat_template=True is not supported: the rollout keeps every turn's tokens as "
            "generated (the training form of the template); set it False"
        )
    if settings.completion_callback:
        raise ConfigError(
            f"{_KEY}.completion_callback={settings.completion_callback!r} belongs to rollout.mode=async, which is "
            "not available yet; leave it null (tools and interactions run through tool_config_path and "
            "interaction_config_path)"
        )
    side = settings.tool_response_truncate_side
    if side not in ("left", "right", "middle"):
        raise ConfigError(f"{_KEY}.tool_response_truncate_side={side!r}; expected left, right or middle")
    for key in ("max_assistant_turns", "max_user_turns", "max_parallel_calls", "max_tool_response_length"):
        value = getattr(settings, key)
        if value is not None and value < 0:
            raise ConfigError(f"{_KEY}.{key}={value} must be >= 0 (or null)")
    if settings.tool_call_timeout is not None and settings.tool_call_timeout <= 0:
        raise ConfigError(f"{_KEY}.tool_call_timeout={settings.tool_call_timeout} must be > 0 (or null: no limit)")
    if check_files and settings.tool_config_path:
        required = _check_classes(settings.tool_config_path, "tool_config_path", "tools")
        for key in ("data.train_files", "data.val_files"):
            files = config.data.train_files if key == "data.train_files" else config.data.val_files
            for path in [files] if isinstance(files, str) else list(files or []):
                _check_tools_kwargs(key, str(path), required)
    if check_files and settings.interaction_config_path:
        _check_classes(settings.interaction_config_path, "interaction_config_path", "interaction")


def _check_classes(path: str, key: str, section: str) -> dict[str, tuple[str, ...]]:
    """Read a tool/interaction file and import every class it names (nothing is constructed).

    Returns the ``REQUIRED_CREATE_KWARGS`` of the tools whose file entry names them (``tool_schema.function.name``).
    """
    from verl.interactions.utils.interaction_registry import load_interaction_entries
    from verl.tools.utils.tool_registry import load_tool_entries
    from verl.utils.import_utils import load_class_by_name

    load = load_tool_entries if section == "tools" else load_interaction_entries
    required = {}
    try:
        entries = load(path)
        for i, entry in enumerate(entries):
            cls = load_class_by_name(entry["class_name"], f"{path}: {section}[{i}].class_name")
            name = ((entry.get("tool_schema") or {}).get("function") or {}).get("name")
            if name and getattr(cls, "REQUIRED_CREATE_KWARGS", ()):
                required[name] = tuple(cls.REQUIRED_CREATE_KWARGS)
    except (OSError, ValueError, ImportError, AttributeError) as e:
        raise ConfigError(f"{_KEY}.{key}={path!r}: {e}") from None
    return required


def _check_tools_kwargs(key: str, path: str, required: dict[str, tuple[str, ...]]) -> None:
    """Every row of a local parquet file carries the ``create_kwargs`` its offered tools need."""
    import os

    if not required or not path.endswith(".parquet") or not os.path.isfile(os.path.expanduser(path)):
        return
    import pyarrow.parquet as pq

    local = os.path.expanduser(path)
    if "extra_info" in pq.read_schema(local).names:
        rows = pq.read_table(local, columns=["extra_info"]).column("extra_info").to_pylist()
    else:
        rows = [{}] * pq.read_metadata(local).num_rows
    for index, extra in enumerate(rows):
        tools_kwargs = (extra or {}).get("tools_kwargs") or {}
        offered = list(tools_kwargs) if tools_kwargs else list(required)  # a row naming no tools gets them all
        for name in offered:
            given = (tools_kwargs.get(name) or {}).get("create_kwargs") or {}
            missing = [arg for arg in required.get(name, ()) if given.get(arg) is None]
            if missing:
                raise ConfigError(
                    f"{key}: row {index} of {path} offers tool {name!r} without create_kwargs {missing}; expected "
                    f"extra_info.tools_kwargs.{name}.create_kwargs with them (see examples/data_preprocess/"
                    "gsm8k_multiturn_w_tool.py)"
                )
