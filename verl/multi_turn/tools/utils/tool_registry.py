"""Reading verl's tool config file: ``tools: [{class_name, config, tool_schema}]`` (YAML or JSON)."""

from __future__ import annotations

import os

from omegaconf import OmegaConf

from verl.multi_turn.tools.schemas import OpenAIFunctionToolSchema
from verl.utils.import_utils import load_class_by_name


def load_tool_entries(tools_config_file: str) -> list[dict]:
    """The ``tools`` entries of the file as plain dicts, checked for shape (no tool is built)."""
    if not tools_config_file or not os.path.isfile(tools_config_file):
        raise FileNotFoundError(f"multi_turn.tool_config_path: no such file {tools_config_file!r}")
    raw = OmegaConf.to_container(OmegaConf.load(tools_config_file), resolve=True)
    entries = raw.get("tools") if isinstance(raw, dict) else None
    if not isinstance(entries, list):
        raise ValueError(f"{tools_config_file}: expected a top-level 'tools' list")
    for i, entry in enumerate(entries):
        if not isinstance(entry, dict) or "class_name" not in entry:
            raise ValueError(f"{tools_config_file}: tools[{i}] needs a 'class_name' (module.Class)")
    return entries


def initialize_tools_from_config(tools_config_file: str) -> list:
    """Construct every tool of the file, in file order, as ``cls(config=dict, tool_schema=schema or None)``."""
    tools = []
    for i, entry in enumerate(load_tool_entries(tools_config_file)):
        where = f"{tools_config_file}: tools[{i}].class_name"
        cls = load_class_by_name(entry["class_name"], where)
        schema = entry.get("tool_schema")
        tool_schema = OpenAIFunctionToolSchema.model_validate(schema) if schema else None
        tools.append(cls(config=dict(entry.get("config") or {}), tool_schema=tool_schema))
    return tools
