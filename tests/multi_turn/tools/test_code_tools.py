"""CodeInterpreterTool (local sandbox) and SandboxFusionTool (a local stand-in service): answers, errors, limits."""

import asyncio

import pytest

from tests.sandbox_fusion_server import sandbox_fusion_server, unused_local_url
from verl.multi_turn.tools.base_tool import initialize_tools_from_config
from verl.multi_turn.tools.code_interpreter_tool import CodeInterpreterTool
from verl.multi_turn.tools.sandbox_fusion_tools import SandboxFusionTool


def _call(tool, parameters):
    async def go():
        instance = await tool.create()
        try:
            return await tool.execute(instance, parameters)
        finally:
            await tool.release(instance)

    return asyncio.run(go())


@pytest.fixture(scope="module")
def interpreter():
    return CodeInterpreterTool({"default_timeout": 1, "memory_limit_mb": 512, "max_output_chars": 50})


@pytest.fixture
def server():
    with sandbox_fusion_server() as s:
        yield s


def test_default_schema_and_config_loading(tmp_path):
    path = tmp_path / "tools.yaml"
    path.write_text(
        "tools:\n"
        "  - class_name: verl.tools.code_interpreter_tool.CodeInterpreterTool\n"
        "    config: {default_timeout: 3}\n"
        "  - class_name: verl.tools.sandbox_fusion_tools.SandboxFusionTool\n"
        "    config: {sandbox_fusion_url: 'http://127.0.0.1:1/run_code', rate_limit: 2}\n"
    )
    local, remote = initialize_tools_from_config(str(path))
    assert (type(local), type(remote)) == (CodeInterpreterTool, SandboxFusionTool)
    assert local.name == remote.name == "code_interpreter" and local.default_timeout == 3.0
    function = local.tool_schema.function
    assert function.parameters.required == ["code"] and function.parameters.properties["code"].type == "string"


@pytest.mark.parametrize(
    "config, key",
    [({"default_timeout": 0}, "default_timeout"), ({"memory_limit_mb": "lots"}, "memory_limit_mb")],
)
def test_bad_interpreter_config_names_the_key(config, key):
    with pytest.raises(ValueError, match=key):
        CodeInterpreterTool(config)


def test_interpreter_answers_with_stdout(interpreter):
    text, reward, metrics = _call(interpreter, {"code": "print(sum(range(10)))"})
    assert (text, reward, metrics["error"]) == ("45\n", 0.0, 0)
    assert _call(interpreter, {"code": "x = 1"})[0] == "no stdout here"
    text, _, metrics = _call(interpreter, {"code": "print('before')\n1 / 0"})
    assert text.startswith("before\n") and "ZeroDivisionError" in text and metrics["error"] == 1


@pytest.mark.parametrize(
    "code, expected",
    [
        ("while True: pass", "wall-clock limit of 1 s"),
        ("data = bytearray(10 * 1024 ** 3)", "MemoryError"),
        ("import socket\nsocket.create_connection(('127.0.0.1', 9))", "network access"),
        ("open('/tmp/verl-code-tool-escape', 'w')", "blocked call: writing"),
    ],
)
def test_interpreter_failures_come_back_as_text(interpreter, code, expected):
    text, _, metrics = _call(interpreter, {"code": code})
    assert text.startswith("no stdout here\n") and expected in text and metrics["error"] == 1


def test_interpreter_limits_come_from_the_config(interpreter):
    text, _, _ = _call(interpreter, {"code": "print('x' * 1000)"})
    assert text == "x" * 50 + "\n[output cut to 50 characters]"
    # a larger timeout asked by the model does not lift the configured one
    text, _, _ = _call(interpreter, {"code": "import time; time.sleep(5)", "timeout": 100})
    assert "wall-clock limit of 1 s" in text


@pytest.mark.parametrize("parameters", [{}, {"code": "  "}, {"code": 3}, {"code": "print(1)", "timeout": -1}])
def test_bad_arguments_are_answered_not_raised(interpreter, parameters):
    text, _, metrics = _call(interpreter, parameters)
    assert text.startswith("Error: '") and metrics["error"] == 1


def test_sandbox_fusion_tool_runs_code(server):
    tool = SandboxFusionTool({"sandbox_fusion_url": server.url, "default_timeout": 4, "memory_limit_mb": 256})
    assert _call(tool, {"code": "print('hi')"})[0] == "hi\n"
    payload = server.payloads[-1]
    assert (payload["run_timeout"], payload["memory_limit_MB"], payload["language"]) == (4, 256, "python")
    assert _call(tool, {"code": "x = 1"})[0] == "no stdout here"
    text, _, metrics = _call(tool, {"code": "1 / 0", "timeout": 2})
    assert text.startswith("no stdout here\n") and "ZeroDivisionError" in text and metrics["error"] == 1
    assert server.payloads[-1]["run_timeout"] == 2
    text, _, _ = _call(tool, {"code": "print(1)", "language": "cobol"})
    assert text.startswith("Error: 'language'")


def test_sandbox_fusion_tool_service_down():
    tool = SandboxFusionTool({"sandbox_fusion_url": unused_local_url()})
    text, _, metrics = _call(tool, {"code": "print(1)"})
    assert text.startswith("no stdout here\nAPI Request Error") and metrics["error"] == 1


def test_sandbox_fusion_tool_config_errors():
    with pytest.raises(ValueError, match="sandbox_fusion_url"):
        SandboxFusionTool({})
    with pytest.raises(ValueError, match="rate_limit"):
        SandboxFusionTool({"sandbox_fusion_url": "http://x/run_code", "rate_limit": 0})
    with pytest.raises(ValueError, match="default_language"):
        SandboxFusionTool({"sandbox_fusion_url": "http://x/run_code", "default_language": "cobol"})


def _run_together(calls):
    async def go():
        return await asyncio.gather(*(tool.execute(f"t{i}", parameters) for i, (tool, parameters) in enumerate(calls)))

    return asyncio.run(go())


SLOW = {"code": "import time\ntime.sleep(0.3)\nprint('done')"}


@pytest.mark.parametrize("global_limit", [False, True])
def test_sandbox_fusion_tool_rate_limit(server, global_limit):
    config = {"sandbox_fusion_url": server.url, "rate_limit": 1, "enable_global_rate_limit": global_limit}
    tools = [SandboxFusionTool(config), SandboxFusionTool(config)]
    results = _run_together([(tools[0], SLOW), (tools[0], SLOW), (tools[1], SLOW), (tools[1], SLOW)])
    assert [r[0] for r in results] == ["done\n"] * 4
    # one request at a time per tool; with the global limit, one at a time for both tools together
    assert server.max_in_flight == (1 if global_limit else 2)
