"""``tool_agent``: assistant turns with tool calls and, optionally, a user simulator (an interaction).

The trajectory asks for its next assistant turn, runs that turn's tool calls (concurrently, each with a timeout) or
lets the interaction answer, and asks again. It stops on a turn without calls, at ``max_assistant_turns`` /
``max_user_turns``, when the interaction ends it, or at the response length. The model's sampled ids enter the
trajectory as they are (no re-tokenisation, so no token drift); everything else is the chat template's difference
between the conversation before and after the new messages.
"""

from __future__ import annotations

import asyncio
import copy
import logging
import math
import time

from verl.multi_turn.agent_loop.base import AgentLoopBase, AgentLoopOutput, register
from verl.multi_turn.tool_parser import ParsedTurn, get_tool_parser
from verl.multi_turn.tools.schemas import OpenAIFunctionCallSchema, OpenAIFunctionParsedSchema
from verl.multi_turn.trajectory import Trajectory
from verl.multi_turn.turn_engine import GeneratedTurn

logger = logging.getLogger(__name__)

__all__ = ["ToolAgentLoop", "truncate_text"]


def truncate_text(text: str, limit: int, side: str) -> str:
    """Cut a tool response to ``limit`` characters, keeping its ``left``, ``right`` or both ends (``middle``)."""
    if limit <= 0 or len(text) <= limit:
        return text
    marker = "...(truncated)..."
    if side == "left":
        return text[:limit] + marker
    if side == "right":
        return marker + text[-limit:]
    half = limit // 2
    return text[:half] + marker + text[len(text) - (limit - half) :]


_warned_unused_tools_kwargs = False


def _warn_unused_tools_kwargs(names: list[str]) -> None:
    """Say once per process that rows name tools while no multi_turn.tool_config_path defines any."""
    global _warned_unused_tools_kwargs
    if not _warned_unused_tools_kwargs:
        _warned_unused_tools_kwargs = True
        logger.warning(
            "rows carry tools_kwargs for %s but multi_turn.tool_config_path defines no tools: no tool is offered "
            "and the column is not used",
            names,
        )


@register("tool_agent")
class ToolAgentLoop(AgentLoopBase):
    """Tools come from ``multi_turn.tool_config_path``, the interaction from ``multi_turn.interaction_config_path``
    (both loaded once per rollout and shared by every trajectory through the context)."""

    @property
    def settings(self):
        return self.context.config.multi_turn

    async def run(self, **kwargs) -> AgentLoopOutput:
        t = self._trajectory(kwargs)
        self._tool_seconds = 0.0
        try:
            await self._open(t)
            while not t.done:
                turn = await self.server.generate(t.generation_prompt, t.remaining)
                await self._after_turn(t, turn)
        finally:
            await self._close(t)
        return AgentLoopOutput(
            prompt_ids=t.prompt_ids,
            response_ids=t.response_ids,
            response_mask=t.loss_mask,
            response_logprobs=t.log_probs,
            response_versions=t.versions,
            num_turns=t.assistant_turns,
            messages=t.messages,
            reward_scores=t.reward_scores(),
            user_turns=t.user_turns,
            tool_calls=t.tool_calls,
            tool_seconds=self._tool_seconds,
            template_drift=not self.matches_template(t),
        )

    def _trajectory(self, row_fields: dict) -> Trajectory:
        tools = self.context.tools
        row_tools = dict(row_fields.get("tools_kwargs") or {})
        if row_tools and not tools:
            # verl's GSM8K tool data run with only an interaction: no tool is offered, the column goes unused
            _warn_unused_tools_kwargs(sorted(row_tools))
            row_tools = {}
        unknown = sorted(set(row_tools) - set(tools))
        if unknown:
            raise KeyError(
                f"row {self.row}: tools_kwargs names tools {unknown} that multi_turn.tool_config_path does not define "
                f"(defined: {sorted(tools)})"
            )
        # A row that names its tools is offered those; a row that names none is offered every tool.
        offered = list(row_tools) if row_tools else list(tools)
        schemas = [tools[name].tool_schema.model_dump(exclude_none=True) for name in offered]
        messages = [dict(m) for m in list(row_fields["raw_prompt"])]
        prompt_ids = self.checked_prompt(self.context.chat.render_ids(messages, schemas, add_generation_prompt=True))
        return Trajectory(
            row=self.row,
            messages=copy.deepcopy(messages),
            tool_schemas=schemas,
            tools_kwargs={name: dict(row_tools.get(name) or {}) for name in offered},
            interaction_kwargs=dict(row_fields.get("interaction_kwargs") or {}),
            prompt_ids=prompt_ids,
            response_budget=self.context.request.response_length,
        )

    async def _open(self, t: Trajectory) -> None:
        for name, kwargs in t.tools_kwargs.items():
            await self.context.tools[name].create(t.request_id, **kwargs.get("create_kwargs") or {})
        if self.context.interaction is not None:
            await self.context.interaction.start_interaction(t.request_id, **t.interaction_kwargs)

    async def _close(self, t: Trajectory) -> None:
        for name, kwargs in t.tools_kwargs.items():
            tool = self.context.tools[name]
            t.tool_rewards[name] = float(await tool.calc_reward(t.request_id, **kwargs.get("calc_reward_kwargs") or {}))
            await tool.release(t.request_id, **kwargs.get("release_kwargs") or {})
        if self.context.interaction is not None:
            await self.context.interaction.finalize_interaction(t.request_id)

    async def _after_turn(self, t: Trajectory, turn: GeneratedTurn) -> None:
        t.add_generated(turn.token_ids, turn.log_probs, turn.versions)
        t.assistant_turns += 1
        text = self.context.chat.decode(turn.token_ids)
        t.messages.append({"role": "assistant", "content": text})
        stopped = bool(turn.token_ids) and turn.token_ids[-1] in self.context.stop_token_ids
        if not stopped or t.remaining <= 0:
            t.finish("length")
            return
        parser = get_tool_parser(self.settings.format)
        parsed = parser.parse(text) if self.context.tools else ParsedTurn(content=text)
        max_assistant = self.settings.max_assistant_turns or math.inf
        max_user = self.settings.max_user_turns or math.inf
        interaction = self.context.interaction
        if parsed.calls or parsed.errors:
            if t.assistant_turns >= max_assistant:
                t.finish("max_turns")
                return
            responses = await self._call_tools(t, parsed)
            self._append(t, [{"role": "tool", "content": text} for text in responses])
        elif interaction is not None and t.user_turns < max_user:
            ended, content, score, _ = await interaction.generate_response(
                t.request_id, t.messages, **t.interaction_kwargs
            )
            t.user_turns += 1
            t.turn_scores.append(float(score))
            if ended or t.assistant_turns >= max_assistant:
                t.finish("interaction" if ended else "max_turns")
                return
            self._append(t, [{"role": "user", "content": content}])
        else:
            t.finish("stop")

    async def _call_tools(self, t: Trajectory, parsed: ParsedTurn) -> list[str]:
        limit = self.settings.max_parallel_calls
        calls = parsed.calls[:limit] if limit and limit > 0 else parsed.calls
        skipped = len(parsed.calls) - len(calls)
        start = time.perf_counter()
        results = await asyncio.gather(*(self._execute(t, call) for call in calls))
        self._tool_seconds += time.perf_counter() - start
        notes = [f"Error: only {limit} tool call(s) per turn are run; {skipped} were skipped."] if skipped else []
        return list(results) + parsed.errors + notes

    async def _execute(self, t: Trajectory, parsed: OpenAIFunctionParsedSchema) -> str:
        """Run one call; every failure becomes the tool's answer so the trajectory goes on."""
        tool = self.context.tools.get(parsed.name)
        if tool is None or parsed.name not in t.tools_kwargs:
            return f"Error: there is no tool named {parsed.name!r}; available: {sorted(t.tools_kwargs)}."
        call, bad_arguments = OpenAIFunctionCallSchema.from_openai_function_parsed_schema(parsed)
        if bad_arguments:
            return f"Error: the arguments of {parsed.name} must be a JSON object, got {parsed.arguments[:200]!r}."
        t.tool_calls += 1
        timeout = self.settings.tool_call_timeout
        kwargs = t.tools_kwargs[parsed.name].get("execute_kwargs") or {}
        try:
            text, _, _ = await asyncio.wait_for(
                tool.execute(t.request_id, call.arguments, **kwargs), timeout=timeout if timeout else None
            )
        except asyncio.TimeoutError:
            return f"Error: the call to {parsed.name} did not finish within {timeout} s."
        except Exception as e:  # a tool bug must not end the batch
            logger.warning("tool %s raised %r", parsed.name, e)
            return f"Error: {parsed.name} failed: {type(e).__name__}: {e}"
        return truncate_text(
            str(text), self.settings.max_tool_response_length, self.settings.tool_response_truncate_side
        )

    def _append(self, t: Trajectory, messages: list[dict]) -> None:
        tail, added = self.context.chat.continuation_ids(t.messages, messages, t.tool_schemas)
        t.messages.extend(messages)
        if not t.add_context(tail + added) or t.remaining <= 0:
            t.finish("length")

    def matches_template(self, t: Trajectory) -> bool:
        """Whether the trajectory's ids are what the template gives for its final conversation, with a warning when
        not. ``ignore_strippable`` forgives differences in whitespace only; ``off`` skips the check."""
        mode = self.settings.tokenization_sanity_check_mode
        if mode == "off" or t.stop_reason == "length":
            return True
        ids = t.prompt_ids + t.response_ids
        chat = self.context.chat
        rendered = chat.render_ids(t.messages, t.tool_schemas, add_generation_prompt=False)
        same = rendered[: len(ids)] == ids
        if not same and mode == "ignore_strippable":
            ours, template = (chat.tokenizer.decode(x) for x in (ids, rendered))
            same = "".join(template.split()).startswith("".join(ours.split()))
        if not same:
            logger.warning("multi-turn: trajectory %s differs from its re-tokenised conversation", t.request_id)
        return same
