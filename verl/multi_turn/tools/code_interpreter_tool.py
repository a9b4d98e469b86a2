"""``CodeInterpreterTool``: the model runs Python on this machine, in the local sandbox (``verl.utils.sandbox``).

Tool config (``config:`` of the entry in the tool config file):

* ``default_timeout`` (10 s): wall-clock limit of one call; a call's own ``timeout`` argument may only lower it,
  so a model cannot hold a rollout worker longer than the config allows;
* ``memory_limit_mb`` (1024): address-space limit of the program;
* ``max_output_chars`` (4096): stdout and stderr are each cut to this many characters.

Every failure (time limit, memory, a refused network or file call, an exception) comes back as the tool's text,
so the model sees what went wrong and the trajectory goes on. The shared pieces of the code tools (default schema,
argument checks, answer text) live here too; ``SandboxFusionTool`` uses them with a remote service instead.
"""

from __future__ import annotations

import asyncio
from typing import Any

from verl.multi_turn.tools.base_tool import BaseTool
from verl.multi_turn.tools.schemas import OpenAIFunctionToolSchema
from verl.utils.sandbox import run_python

__all__ = ["CodeInterpreterTool", "CodeToolBase", "code_tool_schema", "code_tool_answer", "config_number"]

NO_STDOUT = "no stdout here"
DEFAULT_SCHEMA = {
    "type": "function",
    "function": {
        "name": "code_interpreter",
        "description": "Runs a Python program and returns what it printed to stdout (and the error, if it failed).",
        "parameters": {
            "type": "object",
            "properties": {"code": {"type": "string", "description": "The Python source code to run."}},
            "required": ["code"],
        },
    },
}


def code_tool_schema() -> OpenAIFunctionToolSchema:
    """``code_interpreter(code: str)``."""
    return OpenAIFunctionToolSchema.model_validate(DEFAULT_SCHEMA)


def config_number(tool: str, config: dict, key: str, default: float, cast: type = int) -> Any:
    """``config[key]`` (or ``default``) as a positive ``cast``; a ValueError naming the tool and key otherwise."""
    raw = config.get(key, default)
    try:
        value = cast(raw)
    except (TypeError, ValueError):
        value = 0
    if isinstance(raw, bool) or value <= 0:
        raise ValueError(f"{tool} config {key}={raw!r}: expected a positive {cast.__name__}")
    return value


def code_tool_answer(stdout: str | None, stderr: str | None, failed: bool) -> str:
    """The text the model reads: stdout (or "no stdout here"), followed by stderr when the run failed."""
    text = stdout or NO_STDOUT
    if failed and stderr:
        text = f"{text.rstrip()}\n{stderr.rstrip()}"
    return text


class CodeToolBase(BaseTool):
    """What both code tools share: the default schema, per-trajectory bookkeeping and argument checks."""

    def __init__(self, config: dict, tool_schema: OpenAIFunctionToolSchema | None = None):
        super().__init__(config, tool_schema)
        self._instances: dict[str, dict] = {}

    def get_openai_tool_schema(self) -> OpenAIFunctionToolSchema:
        """``code_interpreter(code: str)``."""
        return code_tool_schema()

    async def create(self, instance_id: str | None = None, **kwargs) -> str:
        """Start counting this trajectory's calls."""
        instance_id = await super().create(instance_id)
        self._instances[instance_id] = {"calls": 0}
        return instance_id

    async def release(self, instance_id: str, **kwargs) -> None:
        """Forget the trajectory."""
        self._instances.pop(instance_id, None)

    def _parse_call(self, parameters: Any, default_timeout: float) -> tuple[str, float, str | None]:
        """``(code, timeout, error text or None)`` from a call's arguments."""
        code = parameters.get("code") if isinstance(parameters, dict) else None
        if not isinstance(code, str) or not code.strip():
            return "", 0.0, f"Error: 'code' must be a non-empty string of source code, got {code!r:.100}."
        timeout = parameters.get("timeout", default_timeout)
        if isinstance(timeout, bool) or not isinstance(timeout, int | float) or timeout <= 0:
            return "", 0.0, f"Error: 'timeout' must be a positive number of seconds, got {timeout!r}."
        return code, timeout, None

    def _count_call(self, instance_id: str) -> None:
        self._instances.setdefault(instance_id, {"calls": 0})["calls"] += 1


class CodeInterpreterTool(CodeToolBase):
    """The ``code_interpreter`` tool backed by the local sandbox: returns the program's stdout, or its error."""

    def __init__(self, config: dict, tool_schema: OpenAIFunctionToolSchema | None = None):
        super().__init__(config, tool_schema)
        name = type(self).__name__
        self.default_timeout = config_number(name, self.config, "default_timeout", 10, float)
        self.memory_limit_mb = config_number(name, self.config, "memory_limit_mb", 1024)
        self.max_output_chars = config_number(name, self.config, "max_output_chars", 4096)

    async def execute(self, instance_id: str, parameters: dict[str, Any], **kwargs) -> tuple[str, float, dict]:
        """Run ``parameters["code"]``; returns ``(stdout or error text, 0.0, {"duration_s", "error"})``."""
        code, timeout, error = self._parse_call(parameters, self.default_timeout)
        if error:
            return error, 0.0, {"duration_s": 0.0, "error": 1}
        self._count_call(instance_id)
        # the blocking run goes to a thread so other trajectories keep generating meanwhile
        result = await asyncio.to_thread(
            run_python,
            code,
            timeout_s=min(timeout, self.default_timeout),
            memory_mb=self.memory_limit_mb,
            max_output_chars=self.max_output_chars,
        )
        failed = result.status != "ok"
        text = code_tool_answer(result.stdout, result.stderr, failed)
        if result.truncated:
            text += f"\n[output cut to {self.max_output_chars} characters]"
        return text, 0.0, {"duration_s": result.duration, "error": int(failed)}
