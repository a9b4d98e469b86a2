"""Tool-call parsers: find the function calls in an assistant turn's text (``multi_turn.format``).

A parser is registered by name; ``hermes`` is the ``<tool_call>{"name": ..., "arguments": {...}}</tool_call>`` format
that Qwen2.5, Qwen3 and the project's own chat template use. Add another with ``@register_tool_parser("name")``.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field

from verl.multi_turn.tools.schemas import OpenAIFunctionParsedSchema
from verl.utils.registry import NamedRegistry

__all__ = ["ParsedTurn", "ToolParser", "HermesToolParser", "register_tool_parser", "get_tool_parser"]

_PARSERS = NamedRegistry("tool-call parser")


@dataclass
class ParsedTurn:
    """An assistant turn split into its text and its calls.

    ``errors`` holds one message per call block that could not be read (bad JSON, no name); the rollout answers the
    model with them, so a malformed call costs the model a turn instead of ending the trajectory.
    """

    content: str
    calls: list[OpenAIFunctionParsedSchema] = field(default_factory=list)
    errors: list[str] = field(default_factory=list)


class ToolParser:
    """Base class: ``parse(text) -> ParsedTurn``."""

    def parse(self, text: str) -> ParsedTurn:
        raise NotImplementedError


def register_tool_parser(name: str):
    """Class decorator: make a parser selectable as ``multi_turn.format=<name>``."""

    return _PARSERS.decorator(name)


def get_tool_parser(name: str) -> ToolParser:
    """A parser instance by its registered name; KeyError lists the registered ones."""
    if name not in _PARSERS:
        raise KeyError(
            f"multi_turn.format={name!r} is not a registered tool-call parser; choose from {sorted(_PARSERS)}"
        )
    return _PARSERS[name]()


def registered_tool_parsers() -> list[str]:
    """Names ``multi_turn.format`` accepts."""
    return sorted(_PARSERS)


@register_tool_parser("hermes")
class HermesToolParser(ToolParser):
    """``<tool_call>{json}</tool_call>`` blocks; an opened block that never closes (cut by the length limit) is an
    error, not a call."""

    _BLOCK = re.compile(r"<tool_call>(.*?)</tool_call>", re.DOTALL)
    OPEN = "<tool_call>"

    def parse(self, text: str) -> ParsedTurn:
        calls, errors = [], []
        for match in self._BLOCK.finditer(text):
            call, error = self._read_call(match.group(1).strip())
            if call is not None:
                calls.append(call)
            else:
                errors.append(error)
        content = self._BLOCK.sub("", text)
        if self.OPEN in content:  # a partial block: the turn ended inside it
            errors.append("Error: an unfinished <tool_call> block (no closing </tool_call>) was ignored.")
            content = content[: content.index(self.OPEN)]
        return ParsedTurn(content=content.strip(), calls=calls, errors=errors)

    @staticmethod
    def _read_call(body: str) -> tuple[OpenAIFunctionParsedSchema | None, str]:
        try:
            payload = json.loads(body)
        except json.JSONDecodeError as e:
            return None, f"Error: the tool call {body[:200]!r} is not valid JSON ({e.msg})."
        if not isinstance(payload, dict) or not isinstance(payload.get("name"), str):
            return None, f"Error: the tool call {body[:200]!r} needs a string 'name' and an 'arguments' object."
        arguments = payload["arguments"] if "arguments" in payload else {}
        # Arguments stay a JSON string here: OpenAIFunctionCallSchema decodes them and flags a bad payload.
        text = arguments if isinstance(arguments, str) else json.dumps(arguments, ensure_ascii=False)
        return OpenAIFunctionParsedSchema(name=payload["name"], arguments=text), ""
