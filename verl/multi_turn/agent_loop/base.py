"""Agent loops: how one trajectory is played, turn by turn, against a generation server.

An agent loop is a class registered by name (``@register("my_agent")``, or an entry of the file that
``actor_rollout_ref.rollout.agent.agent_loop_config_path`` names). Each data row picks its loop with its
``agent_name`` column (rows without one take ``rollout.agent.default_agent_loop``). The rollout makes one loop
instance per trajectory and runs all of them concurrently as coroutines: a loop awaits ``self.server.generate`` for
each assistant turn, and whatever else it awaits (a tool, a user simulator) holds back only its own trajectory.

The config file is a YAML list::

    - name: my_agent
      _target_: my_package.my_module.MyAgentLoop
"""

from __future__ import annotations

import importlib
import os
from abc import ABC, abstractmethod
from dataclasses import dataclass, field
from typing import Any

from verl.multi_turn.chat_template import ChatTemplate
from verl.multi_turn.turn_engine import TurnServer
from verl.utils.registry import NamedRegistry
from verl.workers.rollout.base import SamplingRequest

__all__ = [
    "AgentLoopBase",
    "AgentLoopContext",
    "AgentLoopOutput",
    "get_agent_loop_class",
    "load_agent_loop_config",
    "read_agent_loop_config",
    "register",
    "registered_agent_loops",
]


@dataclass
class AgentLoopContext:
    """What every loop of one generate call shares: the server, the template, the tools and the budgets.

    ``config`` is the typed ``actor_rollout_ref.rollout`` section; ``tools`` maps names to ``BaseTool`` instances
    (empty unless ``multi_turn.enable``); ``interaction`` is a ``BaseInteraction`` or None; ``request`` the
    batch's sampling; ``stop_token_ids`` where a turn ends (EOS and the template's end-of-turn token).
    """

    server: TurnServer
    chat: ChatTemplate
    config: Any
    request: SamplingRequest
    stop_token_ids: list[int]
    tools: dict = field(default_factory=dict)
    interaction: Any = None

    @property
    def tokenizer(self):
        return self.chat.tokenizer


@dataclass
class AgentLoopOutput:
    """One finished trajectory.

    ``prompt_ids``: the templated prompt (at most ``rollout.prompt_length`` ids); ``response_ids``: everything after
    it (at most ``rollout.response_length``), with ``response_mask`` 1 on the ids the model generated (trained on)
    and 0 on tool, user and template ids; ``response_logprobs`` the engine's log-prob per response id (None where
    unknown); ``response_versions`` (partial rollout) the weight version that sampled each response id (-1 on ids
    the model did not generate; None: not reported). ``num_turns`` counts assistant turns; ``user_turns``,
    ``tool_calls``, ``tool_seconds`` (wall time spent waiting on tools) and ``template_drift`` (the ids differ from
    the re-templated final conversation) become the ``multi_turn/*`` step metrics; ``metrics`` are averaged over the
    batch as ``agent_loop/<key>``.
    """

    prompt_ids: list[int]
    response_ids: list[int]
    response_mask: list[int]
    response_logprobs: list[float | None] | None = None
    num_turns: int = 1
    response_versions: list[int] | None = None
    messages: list[dict] | None = None
    reward_scores: dict[str, Any] = field(default_factory=dict)
    user_turns: int = 0
    tool_calls: int = 0
    tool_seconds: float = 0.0
    template_drift: bool = False
    metrics: dict[str, float] = field(default_factory=dict)


class AgentLoopBase(ABC):
    """One trajectory's loop. ``row`` is the index of its prompt in the batch (for error messages)."""

    def __init__(self, context: AgentLoopContext, row: int = 0):
        self.context = context
        self.row = row

    @property
    def server(self) -> TurnServer:
        return self.context.server

    @property
    def tokenizer(self):
        return self.context.tokenizer

    def checked_prompt(self, prompt_ids: list[int]) -> list[int]:
        """``prompt_ids``, or a ValueError naming the row when they exceed ``rollout.prompt_length`` (checked before
        generating, so an oversize prompt fails before any engine time is spent)."""
        limit = self.context.config.prompt_length
        if len(prompt_ids) > limit:
            raise ValueError(
                f"row {self.row}: the prompt ({type(self).__name__}, with its tool schemas) is {len(prompt_ids)} "
                f"tokens, more than rollout.prompt_length={limit} (data.max_prompt_length); raise it"
            )
        return prompt_ids

    @abstractmethod
    async def run(self, **kwargs) -> AgentLoopOutput:
        """Play the trajectory. ``kwargs`` are the row's non-tensor fields: ``raw_prompt`` (the chat messages),
        ``tools_kwargs``, ``interaction_kwargs``, ``data_source``, ``extra_info``, ... as the dataset gives them."""


_REGISTRY = NamedRegistry("agent loop", AgentLoopBase)


def register(name: str):
    """Class decorator: make an ``AgentLoopBase`` subclass selectable as ``agent_name: <name>``."""
    return _REGISTRY.decorator(name)


def registered_agent_loops() -> list[str]:
    """Names of the registered agent loops (built-ins and those loaded so far)."""
    return _REGISTRY.names()


def get_agent_loop_class(name: str) -> type[AgentLoopBase]:
    if name not in _REGISTRY:
        raise KeyError(
            f"agent_name={name!r} is not a registered agent loop; registered: {registered_agent_loops()} "
            "(add yours with @register or rollout.agent.agent_loop_config_path)"
        )
    return _REGISTRY[name]


def read_agent_loop_config(path: str) -> list[tuple[str, type[AgentLoopBase]]]:
    """The ``(name, class)`` entries of an agent-loop config file, every class imported and checked.

    Raises ValueError naming the file and the entry for a missing file, a malformed entry, a class that does
    not import or that is not an ``AgentLoopBase``.
    """
    from omegaconf import OmegaConf

    key = "actor_rollout_ref.rollout.agent.agent_loop_config_path"
    if not os.path.isfile(path):
        raise ValueError(f"{key}={path!r}: no such file")
    entries = OmegaConf.to_container(OmegaConf.load(path), resolve=True)
    if not isinstance(entries, list):
        raise ValueError(f"{key}={path!r}: expected a YAML list of {{name, _target_}} entries")
    loaded = []
    for i, entry in enumerate(entries):
        if not isinstance(entry, dict) or not entry.get("name") or not entry.get("_target_"):
            raise ValueError(f"{path}: entry {i} must have a 'name' and a '_target_' (module.Class), got {entry!r}")
        target = str(entry["_target_"])
        module_name, _, class_name = target.rpartition(".")
        try:
            cls = getattr(importlib.import_module(module_name), class_name)
        except (ImportError, AttributeError, ValueError) as e:
            raise ValueError(f"{path}: entry {entry['name']!r}: _target_ {target!r} does not import: {e}") from e
        if not (isinstance(cls, type) and issubclass(cls, AgentLoopBase)):
            raise ValueError(f"{path}: entry {entry['name']!r}: {target} is not a subclass of AgentLoopBase")
        loaded.append((str(entry["name"]), cls))
    return loaded


def load_agent_loop_config(path: str) -> list[str]:
    """Register every loop an agent-loop config file names; returns their names."""
    names = []
    for name, cls in read_agent_loop_config(path):
        _REGISTRY.add(name, cls)
        names.append(name)
    return names
