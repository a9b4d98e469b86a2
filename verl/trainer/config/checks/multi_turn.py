"""Config checks of ``actor_rollout_ref.rollout.multi_turn`` / ``agent`` / ``mode=async``: everything an agent-loop
run needs, before Ray starts.

The tool, interaction and agent-loop files are read and their classes imported here, so a wrong class name or a
missing file fails in seconds in the driver instead of inside every worker after the models are built.
"""

from __future__ import annotations

from verl.trainer.config import ConfigError
from verl.trainer.config.checks.data import data_file_paths, parquet_column, uses_custom_dataset

__all__ = ["check_multi_turn"]

_KEY = "actor_rollout_ref.rollout.multi_turn"


def check_multi_turn(config, check_files: bool = True) -> None:
    """Refuse a multi-turn setting the rollout cannot honour (``config``: the typed PPO config).

    ``check_files=False`` (remote paths, unit tests) skips reading the tool and interaction files.
    """
    _check_tool_settings(config, check_files)
    _check_agent_loops(config, check_files)


def _check_tool_settings(config, check_files: bool) -> None:
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
    from verl.multi_turn.tool_parser import registered_tool_parsers

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
            f"{_KEY}.completion_callback={settings.completion_callback!r} configures verl 0.4's async chat "
            "scheduler, which agent loops replace here; leave it null and register your loop with "
            "actor_rollout_ref.rollout.agent.agent_loop_config_path (rows pick it by agent_name)"
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
        for key in () if uses_custom_dataset(config) else ("data.train_files", "data.val_files"):
            for path in data_file_paths(config, key):
                _check_tools_kwargs(key, path, required)
    if check_files and settings.interaction_config_path:
        _check_classes(settings.interaction_config_path, "interaction_config_path", "interaction")


def _check_agent_loops(config, check_files: bool) -> None:
    """``rollout.mode=async`` runs where it can, and every agent loop the run may pick is registered."""
    rollout = config.actor_rollout_ref.rollout
    agent = rollout.agent
    key = "actor_rollout_ref.rollout.agent"
    if not rollout.uses_agent_loops:
        for name in ("agent_loop_config_path", "default_agent_loop"):
            if getattr(agent, name) is not None:
                raise ConfigError(
                    f"{key}.{name}={getattr(agent, name)!r} is used only by agent-loop rollouts; set "
                    "actor_rollout_ref.rollout.mode=async (or multi_turn.enable=True), or leave it null"
                )
        return
    if rollout.mode == "async" and rollout.name not in ("hf", "vllm"):
        raise ConfigError(
            f"actor_rollout_ref.rollout.mode='async' runs with rollout.name=vllm (each turn a request of its own, "
            f"continuously batched) or hf (turns batched); got name={rollout.name!r}"
        )
    if not config.data.return_raw_chat:
        raise ConfigError(
            "data.return_raw_chat=False: agent loops (rollout.mode=async or multi_turn.enable=True) need "
            "data.return_raw_chat=True, since each loop templates its row's chat messages itself"
        )
    from verl.multi_turn.agent_loop import read_agent_loop_config, registered_agent_loops

    names = set(registered_agent_loops())
    if agent.agent_loop_config_path and check_files:
        try:
            names |= {name for name, _ in read_agent_loop_config(agent.agent_loop_config_path)}
        except ValueError as e:
            raise ConfigError(str(e)) from None
    elif agent.agent_loop_config_path:
        return  # a remote file: its names are known only in the workers
    default = agent.default_agent_loop or ("tool_agent" if rollout.multi_turn.enable else "single_turn_agent")
    if default not in names:
        raise ConfigError(
            f"{key}.default_agent_loop={default!r} is not a registered agent loop; registered: {sorted(names)}"
        )
    if check_files and not uses_custom_dataset(config):
        for data_key in ("data.train_files", "data.val_files"):
            for path in data_file_paths(config, data_key):
                _check_agent_names(data_key, path, names)


def _check_agent_names(key: str, path: str, names: set[str]) -> None:
    """Every ``agent_name`` of a local parquet file names a registered loop."""
    for index, name in enumerate(parquet_column(key, path, "agent_name") or []):
        if name and name not in names:
            raise ConfigError(
                f"{key}: row {index} of {path} has agent_name={name!r}, which is not a registered agent loop; "
                f"registered: {sorted(names)} (add yours with actor_rollout_ref.rollout.agent.agent_loop_config_path)"
            )


def _check_classes(path: str, key: str, section: str) -> dict[str, tuple[str, ...]]:
    """Read a tool/interaction file and import every class it names (nothing is constructed).

    Returns the ``REQUIRED_CREATE_KWARGS`` of the tools whose file entry names them (``tool_schema.function.name``).
    """
    from verl.multi_turn.interactions.utils.interaction_registry import load_interaction_entries
    from verl.multi_turn.tools.utils.tool_registry import load_tool_entries
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
    if not required:
        return
    for index, extra in enumerate(parquet_column(key, path, "extra_info") or []):
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
