"""OpenAI function-tool schemas: what a tool advertises to the model, and the calls parsed from its output.

The shapes are the ones the OpenAI chat API and Hugging Face chat templates use, so a schema's ``model_dump()`` can be
passed straight to ``tokenizer.apply_chat_template(..., tools=[...])``.
"""

from __future__ import annotations

import json
from typing import Any, Literal

from pydantic import BaseModel, Field


class OpenAIFunctionPropertySchema(BaseModel):
    """One argument of a function: its JSON type, what it means and, optionally, the values it may take."""

    type: str
    description: str | None = None
    enum: list[str] | None = None
    items: dict[str, Any] | None = None  # the element schema of an ``array`` argument


class OpenAIFunctionParametersSchema(BaseModel):
    """The JSON-schema object describing a function's arguments."""

    type: str
    properties: dict[str, OpenAIFunctionPropertySchema]
    required: list[str] = Field(default_factory=list)


class OpenAIFunctionSchema(BaseModel):
    """A function the model may call."""

    name: str
    description: str
    parameters: OpenAIFunctionParametersSchema
    strict: bool = False


class OpenAIFunctionToolSchema(BaseModel):
    """A tool entry of the ``tools`` list (only ``type: function`` exists today)."""

    type: str
    function: OpenAIFunctionSchema


class OpenAIFunctionParsedSchema(BaseModel):
    """A call as the parser found it in the model's text: the arguments are still a JSON string."""

    name: str
    arguments: str


class OpenAIFunctionCallSchema(BaseModel):
    """A call with decoded arguments, ready for ``BaseTool.execute``."""

    name: str
    arguments: dict[str, Any]

    @staticmethod
    def from_openai_function_parsed_schema(
        parsed: OpenAIFunctionParsedSchema,
    ) -> tuple[OpenAIFunctionCallSchema, bool]:
        """Decode the arguments; returns ``(call, has_decode_error)``.

        Arguments that are not valid JSON, or not a JSON object, decode to ``{}`` and set the error flag, so the
        caller can answer the model with an error message instead of stopping the trajectory.
        """
        try:
            arguments = json.loads(parsed.arguments)
        except (json.JSONDecodeError, TypeError):
            return OpenAIFunctionCallSchema(name=parsed.name, arguments={}), True
        if not isinstance(arguments, dict):
            return OpenAIFunctionCallSchema(name=parsed.name, arguments={}), True
        return OpenAIFunctionCallSchema(name=parsed.name, arguments=arguments), False


class OpenAIFunctionToolCall(BaseModel):
    """A tool call as it appears in an assistant message's ``tool_calls``."""

    id: str
    type: Literal["function"] = "function"
    function: OpenAIFunctionCallSchema
