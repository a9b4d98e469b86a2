"""verl's import paths of the multi-turn plug-ins (verl.tools, verl.interactions, verl.experimental.agent_loop) are
the same module objects as their homes under verl.multi_turn: one class per class, whichever path a user imports,
through configs, pickle and Ray."""

import importlib
import os
import pickle
import subprocess
import sys

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
GSM8K_TOOL_CONFIG = os.path.join(ROOT, "examples", "multiturn", "config", "tool_config", "gsm8k_tool_config.yaml")

# verl's path -> ours: every module of the three packages today
PATHS = {
    "verl.tools": "verl.multi_turn.tools",
    "verl.tools.base_tool": "verl.multi_turn.tools.base_tool",
    "verl.tools.schemas": "verl.multi_turn.tools.schemas",
    "verl.tools.gsm8k_tool": "verl.multi_turn.tools.gsm8k_tool",
    "verl.tools.geo3k_tool": "verl.multi_turn.tools.geo3k_tool",
    "verl.tools.answer_check_tool": "verl.multi_turn.tools.answer_check_tool",  # ours, under verl's prefix too
    "verl.tools.code_interpreter_tool": "verl.multi_turn.tools.code_interpreter_tool",
    "verl.tools.sandbox_fusion_tools": "verl.multi_turn.tools.sandbox_fusion_tools",
    "verl.tools.search_tool": "verl.multi_turn.tools.search_tool",
    "verl.tools.utils": "verl.multi_turn.tools.utils",
    "verl.tools.utils.tool_registry": "verl.multi_turn.tools.utils.tool_registry",
    "verl.tools.utils.search_backends": "verl.multi_turn.tools.utils.search_backends",
    "verl.interactions": "verl.multi_turn.interactions",
    "verl.interactions.base": "verl.multi_turn.interactions.base",
    "verl.interactions.gsm8k_interaction": "verl.multi_turn.interactions.gsm8k_interaction",
    "verl.interactions.utils": "verl.multi_turn.interactions.utils",
    "verl.interactions.utils.interaction_registry": "verl.multi_turn.interactions.utils.interaction_registry",
    "verl.experimental.agent_loop": "verl.multi_turn.agent_loop",
    "verl.experimental.agent_loop.agent_loop": "verl.multi_turn.agent_loop.base",
    "verl.experimental.agent_loop.single_turn_agent_loop": "verl.multi_turn.agent_loop.single_turn",
    "verl.experimental.agent_loop.tool_agent_loop": "verl.multi_turn.agent_loop.tool_agent",
}


@pytest.mark.parametrize("verl_path", sorted(PATHS))
def test_verl_path_is_the_same_module_object(verl_path):
    assert importlib.import_module(verl_path) is importlib.import_module(PATHS[verl_path])
    assert sys.modules[verl_path] is sys.modules[PATHS[verl_path]]


def test_every_module_of_the_new_packages_has_its_verl_path():
    import pkgutil

    ours = {v: k for k, v in PATHS.items()}
    for package in ("verl.multi_turn.tools", "verl.multi_turn.interactions", "verl.multi_turn.agent_loop"):
        path = importlib.import_module(package).__path__
        for info in pkgutil.walk_packages(path, prefix=package + "."):
            assert info.name in ours, f"{info.name} has no verl path in PATHS (add it, and check the alias serves it)"


def test_classes_are_identical_through_every_import_form():
    from verl.interactions.base import BaseInteraction
    from verl.tools.base_tool import BaseTool

    import verl.experimental.agent_loop as verl_loops
    import verl.multi_turn.agent_loop as loops
    import verl.multi_turn.tools.base_tool as base_tool
    import verl.tools
    from verl.multi_turn.interactions.gsm8k_interaction import Gsm8kInteraction
    from verl.multi_turn.tools.gsm8k_tool import Gsm8kTool

    assert BaseTool is base_tool.BaseTool is verl.tools.BaseTool
    assert verl.tools.gsm8k_tool.Gsm8kTool is Gsm8kTool  # attribute access on the alias package
    assert isinstance(Gsm8kTool({}), BaseTool)
    assert isinstance(Gsm8kInteraction({}), BaseInteraction)
    assert Gsm8kTool.__module__ == "verl.multi_turn.tools.gsm8k_tool"  # one module, named by its home
    assert verl_loops is loops and verl_loops.ToolAgentLoop is loops.ToolAgentLoop


def test_a_tool_config_naming_verl_paths_builds_our_classes():
    from verl.multi_turn.tools.gsm8k_tool import Gsm8kTool
    from verl.multi_turn.tools.utils.tool_registry import initialize_tools_from_config

    (tool,) = initialize_tools_from_config(GSM8K_TOOL_CONFIG)  # class_name: verl.tools.gsm8k_tool.Gsm8kTool
    assert type(tool) is Gsm8kTool


def test_agent_loop_registry_is_shared_across_paths():
    from verl.experimental.agent_loop import AgentLoopBase, register
    from verl.multi_turn.agent_loop import get_agent_loop_class, registered_agent_loops
    from verl.multi_turn.agent_loop.tool_agent import ToolAgentLoop

    assert (
        get_agent_loop_class("tool_agent")
        is importlib.import_module("verl.experimental.agent_loop.tool_agent_loop").ToolAgentLoop
        is ToolAgentLoop
    )
    if "import_paths_probe" not in registered_agent_loops():

        @register("import_paths_probe")
        class Probe(AgentLoopBase):
            async def run(self, **kwargs):
                raise NotImplementedError

    assert "import_paths_probe" in registered_agent_loops()


def test_pickle_round_trips_tool_classes_and_instances():
    from verl.tools.base_tool import BaseTool
    from verl.tools.gsm8k_tool import Gsm8kTool as VerlGsm8kTool

    from verl.multi_turn.tools.gsm8k_tool import Gsm8kTool

    assert pickle.loads(pickle.dumps(VerlGsm8kTool)) is Gsm8kTool
    tool = pickle.loads(pickle.dumps(VerlGsm8kTool({"k": 1})))
    assert isinstance(tool, BaseTool) and type(tool) is Gsm8kTool and tool.config == {"k": 1}


def test_a_pickle_naming_verl_paths_loads_in_a_fresh_interpreter():
    # what a pickle written by verl (or any process that saw the class under verl's path) holds: a reference by name
    legacy = b"cverl.tools.gsm8k_tool\nGsm8kTool\n."
    code = (
        "import pickle, sys\n"
        f"cls = pickle.loads({legacy!r})\n"
        "import verl.multi_turn.tools.gsm8k_tool as home\n"
        "assert cls is home.Gsm8kTool, cls\n"
        "assert sys.modules['verl.tools.gsm8k_tool'] is home\n"
        "print('ok')\n"
    )
    env = {**os.environ, "PYTHONPATH": ROOT + os.pathsep + os.environ.get("PYTHONPATH", "")}
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, cwd=ROOT, timeout=300)
    assert out.returncode == 0 and out.stdout.strip() == "ok", out.stderr


def test_ray_ships_a_tool_class_imported_by_verl_path(ray_cluster):
    ray = ray_cluster
    from verl.tools.gsm8k_tool import Gsm8kTool

    @ray.remote(num_cpus=0)
    def build(cls):
        import verl.tools.base_tool

        tool = cls({"name": "x"})
        return type(tool).__module__, isinstance(tool, verl.tools.base_tool.BaseTool), tool

    module, is_tool, tool = ray.get(build.remote(Gsm8kTool))
    assert module == "verl.multi_turn.tools.gsm8k_tool" and is_tool
    assert type(tool) is Gsm8kTool  # the instance comes back as the driver's class
