"""Tool and interaction config files: loading order, schemas, and the errors a bad file gets."""

import asyncio
import textwrap

import pytest

from verl.multi_turn.interactions.base import BaseInteraction
from verl.multi_turn.interactions.utils.interaction_registry import initialize_interaction_from_config
from verl.multi_turn.tools.base_tool import BaseTool, initialize_tools_from_config
from verl.multi_turn.tools.schemas import OpenAIFunctionCallSchema, OpenAIFunctionParsedSchema, OpenAIFunctionToolSchema

SCHEMA = {
    "type": "function",
    "function": {
        "name": "echo",
        "description": "Echo the text.",
        "parameters": {"type": "object", "properties": {"text": {"type": "string"}}, "required": ["text"]},
    },
}


class EchoTool(BaseTool):
    async def execute(self, instance_id, parameters, **kwargs):
        return parameters["text"], 0.0, {}


class SchemaTool(BaseTool):
    def get_openai_tool_schema(self):
        return OpenAIFunctionToolSchema.model_validate({**SCHEMA, "function": {**SCHEMA["function"], "name": "own"}})


class EchoInteraction(BaseInteraction):
    pass


def _write(tmp_path, name, text):
    path = tmp_path / name
    path.write_text(textwrap.dedent(text))
    return str(path)


def test_tools_load_in_file_order_with_their_config_and_schema(tmp_path):
    path = _write(
        tmp_path,
        "tools.yaml",
        f"""
        tools:
          - class_name: {__name__}.SchemaTool
            config: {{}}
          - class_name: {__name__}.EchoTool
            config: {{type: native, limit: 3}}
            tool_schema: {SCHEMA}
        """.replace("'", '"'),
    )
    first, second = initialize_tools_from_config(path)
    assert (type(first), first.name, first.config) == (SchemaTool, "own", {})
    assert (type(second), second.name, second.config) == (EchoTool, "echo", {"type": "native", "limit": 3})
    assert second.tool_schema.function.parameters.required == ["text"]
    assert asyncio.run(second.execute("id", {"text": "hi"})) == ("hi", 0.0, {})


def test_a_tool_without_any_schema_is_refused(tmp_path):
    path = _write(tmp_path, "tools.yaml", f"tools:\n  - class_name: {__name__}.EchoTool\n")
    with pytest.raises(AssertionError, match="tool_schema"):
        initialize_tools_from_config(path)


@pytest.mark.parametrize(
    "text, error, match",
    [
        # verl raises ModuleNotFoundError (an ImportError: `except ImportError` callers still catch it)
        ("tools:\n  - class_name: no_such_module.Tool\n", ModuleNotFoundError, r"tools\[0\].class_name.*no_such_mod"),
        (f"tools:\n  - class_name: {__name__}.Missing\n", ImportError, "has no 'Missing'"),
        ("tools:\n  - config: {}\n", ValueError, r"tools\[0\] needs a 'class_name'"),
        ("other: 1\n", ValueError, "top-level 'tools' list"),
    ],
)
def test_bad_tool_files_name_the_file_and_entry(tmp_path, text, error, match):
    path = _write(tmp_path, "tools.yaml", text)
    with pytest.raises(error, match=match):
        initialize_tools_from_config(path)


def test_an_interaction_module_that_is_not_there_raises_module_not_found(tmp_path):
    path = _write(tmp_path, "interaction.yaml", "interaction:\n  - class_name: no_such_module.Judge\n")
    with pytest.raises(ModuleNotFoundError, match=r"interaction\[0\].class_name.*no_such_module") as info:
        initialize_interaction_from_config(path)
    assert info.value.name == "no_such_module"


def test_missing_tool_file_is_named(tmp_path):
    with pytest.raises(FileNotFoundError, match="tool_config_path.*nope.yaml"):
        initialize_tools_from_config(str(tmp_path / "nope.yaml"))


def test_interaction_file_builds_the_first_entry(tmp_path):
    path = _write(
        tmp_path,
        "interaction.yaml",
        f"interaction:\n  - class_name: {__name__}.EchoInteraction\n    config: {{name: judge}}\n",
    )
    interaction = initialize_interaction_from_config(path)
    assert isinstance(interaction, EchoInteraction) and interaction.name == "judge"
    assert len(asyncio.run(interaction.start_interaction())) == 36


@pytest.mark.parametrize(
    "arguments, expected, error",
    [('{"a": 1}', {"a": 1}, False), ("{not json", {}, True), ("[1, 2]", {}, True)],
)
def test_parsed_call_decoding(arguments, expected, error):
    call, has_error = OpenAIFunctionCallSchema.from_openai_function_parsed_schema(
        OpenAIFunctionParsedSchema(name="f", arguments=arguments)
    )
    assert (call.name, call.arguments, has_error) == ("f", expected, error)
