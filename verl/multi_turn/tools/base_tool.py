"""The tool interface: one instance serves many trajectories, each with its own state under an instance id.

A trajectory's life cycle is ``create`` (once, with the row's ``tools_kwargs[name]["create_kwargs"]``), ``execute``
for every call the model makes, ``calc_reward`` at the end, then ``release``. All four are coroutines so that slow
tools (a sandbox, an HTTP service) never block the other trajectories of the batch.
"""

from __future__ import annotations

import uuid
from typing import Any, ClassVar

from verl.multi_turn.tools.schemas import OpenAIFunctionToolSchema


class BaseTool:
    """Base class of every tool. Subclasses override ``execute`` (and usually ``create``/``calc_reward``)."""

    # ``create_kwargs`` every row offered this tool must carry in ``extra_info.tools_kwargs[<name>]`` (e.g. the
    # ground truth); the config check reads the data files and refuses a row without them before Ray starts.
    REQUIRED_CREATE_KWARGS: ClassVar[tuple[str, ...]] = ()

    def __init__(self, config: dict, tool_schema: OpenAIFunctionToolSchema | None = None):
        self.config = dict(config or {})
        self.tool_schema = tool_schema or self.get_openai_tool_schema()
        if self.tool_schema is None:
            raise AssertionError(
                f"{type(self).__name__}: no tool_schema given in the tool config and get_openai_tool_schema() "
                "returns None; add a tool_schema entry for it"
            )
        self.name = self.tool_schema.function.name

    def get_openai_tool_schema(self) -> OpenAIFunctionToolSchema | None:
        """The schema used when the tool config gives none. None means the config must give one."""
        return None

    async def create(self, instance_id: str | None = None, **kwargs) -> str:
        """Start the per-trajectory state; returns its id (a new uuid4 string when none is given)."""
        return instance_id if instance_id is not None else str(uuid.uuid4())

    async def execute(self, instance_id: str, parameters: dict[str, Any], **kwargs) -> tuple[str, float, dict]:
        """Run one call; returns ``(text for the model, step reward, metrics)``."""
        return "Updated the tool state.", 0.0, {}

    async def calc_reward(self, instance_id: str, **kwargs) -> float:
        """The tool's reward for the finished trajectory."""
        return 0.0

    async def release(self, instance_id: str, **kwargs) -> None:
        """Drop the per-trajectory state."""


def initialize_tools_from_config(tools_config_file: str) -> list[BaseTool]:
    """Build the tools listed in a tool config file (see ``verl.multi_turn.tools.utils.tool_registry``)."""
    from verl.multi_turn.tools.utils.tool_registry import initialize_tools_from_config as _load

    return _load(tools_config_file)
