"""Multi-turn rollout with tools and interactions, on any engine that can continue a batch of token-id prompts.

Every trajectory is its own coroutine: it asks for its next assistant turn, runs its tool calls (concurrently, each
with a timeout) or lets the interaction answer, and asks again; the turns that are ready are generated together in
one engine call (``TurnBatcher``), so a slow tool holds back only its own conversation. A trajectory stops
on a turn without calls, at ``max_assistant_turns`` / ``max_user_turns``, when the interaction ends it, or at the
response length. The output has the single-turn rollout's columns plus ``loss_mask`` (1 only on generated tokens),
and the non-tensor ``messages`` and ``reward_scores``.
"""

from __future__ import annotations

import asyncio
import contextlib
import copy
import logging
import math
import time
from dataclasses import dataclass
from typing import Protocol

import numpy as np
import torch
from tensordict import TensorDict

from verl.protocol import DataProto
from verl.tools.schemas import OpenAIFunctionCallSchema, OpenAIFunctionParsedSchema
from verl.utils.model import compute_position_id_with_mask
from verl.workers.config import RolloutConfig
from verl.workers.rollout.base import BaseRollout, SamplingRequest
from verl.workers.rollout.multi_turn.batcher import TurnBatcher
from verl.workers.rollout.multi_turn.chat import ChatTemplate
from verl.workers.rollout.multi_turn.tool_parser import ParsedTurn, get_tool_parser
from verl.workers.rollout.multi_turn.trajectory import Trajectory

logger = logging.getLogger(__name__)

__all__ = ["GeneratedTurn", "TurnEngine", "MultiTurnRollout", "truncate_text"]


@dataclass
class GeneratedTurn:
    """One assistant turn from the engine: the sampled ids (through the stop token) and their log-probs."""

    token_ids: list[int]
    log_probs: list[float] | None = None


class TurnEngine(Protocol):
    """What the multi-turn loop needs from an engine (HFRollout and vLLMRollout implement it)."""

    def generate_turns(
        self, prompts: list[list[int]], max_tokens: list[int], request: SamplingRequest, stop_token_ids: list[int]
    ) -> list[GeneratedTurn]:
        """One sample per prompt, each stopping at a stop token or its own ``max_tokens``."""


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


class MultiTurnRollout(BaseRollout):
    """Wraps an engine rollout; ``config`` is the ``actor_rollout_ref.rollout`` section (``multi_turn`` inside).

    ``tools`` / ``interaction`` default to the ones the config files name.
    """

    def __init__(self, engine: TurnEngine, config, tokenizer, tools: list | None = None, interaction=None):
        self.engine = engine
        self.config = RolloutConfig.from_config(config)
        self.settings = settings = self.config.multi_turn
        self.chat = ChatTemplate(tokenizer)
        self.parser = get_tool_parser(settings.format)
        if tools is None and settings.tool_config_path:
            from verl.tools.utils.tool_registry import initialize_tools_from_config

            tools = initialize_tools_from_config(settings.tool_config_path)
        self.tools = {tool.name: tool for tool in tools or []}
        if interaction is None and settings.interaction_config_path:
            from verl.interactions.utils.interaction_registry import initialize_interaction_from_config

            interaction = initialize_interaction_from_config(settings.interaction_config_path)
        self.interaction = interaction
        self._loop = asyncio.new_event_loop()

    # ------------------------------------------------------------------------------------------------ public
    def generate_sequences(self, prompts: DataProto) -> DataProto:
        """Run every prompt's ``n`` conversations to the end (non-tensor ``raw_prompt`` required)."""
        # The HF engine unshards an FSDP module here, once for every turn of the batch.
        with getattr(self.engine, "generation_context", contextlib.nullcontext)():
            return self._loop.run_until_complete(self._generate(prompts))

    # ------------------------------------------------------------------------------------------------ the loop
    async def _generate(self, prompts: DataProto) -> DataProto:
        meta = prompts.meta_info
        for key in ("eos_token_id", "pad_token_id"):
            if key not in meta:
                raise KeyError(f"prompts.meta_info[{key!r}] is required by the multi-turn rollout (the worker sets it)")
        eos = meta["eos_token_id"]
        stop_ids = sorted({int(t) for t in (eos if isinstance(eos, list | tuple) else [eos]) if t is not None})
        if self.chat.end_of_turn_id is not None and self.chat.end_of_turn_id not in stop_ids:
            stop_ids.append(self.chat.end_of_turn_id)
        request = SamplingRequest.resolve(meta, self.config)
        trajectories = self._start(prompts, request)
        self._tool_seconds = 0.0
        batcher = TurnBatcher(self.engine, request, stop_ids, live=len(trajectories))
        server = asyncio.ensure_future(batcher.serve())
        try:
            await asyncio.gather(*(self._run(t, batcher, stop_ids) for t in trajectories))
        finally:
            server.cancel()
            await asyncio.gather(*(self._close(t) for t in trajectories))
        self._engine_calls = batcher.engine_calls
        return self._to_batch(prompts, trajectories, request.n, int(meta["pad_token_id"]))

    async def _run(self, t: Trajectory, batcher: TurnBatcher, stop_ids: list[int]) -> None:
        """One trajectory, as its own coroutine: a slow tool call holds back only this conversation."""
        try:
            await self._open(t)
            while not t.done:
                turn = await batcher.generate(t.generation_prompt, t.remaining)
                await self._after_turn(t, turn, stop_ids)
        finally:
            batcher.finished()

    def _start(self, prompts: DataProto, request: SamplingRequest) -> list[Trajectory]:
        non_tensor = prompts.non_tensor_batch
        if "raw_prompt" not in non_tensor:
            raise KeyError(
                "the multi-turn rollout needs the chat messages of each prompt (non_tensor_batch['raw_prompt']); "
                "set data.return_raw_chat=True"
            )
        size = len(prompts)
        empty = _object_array([{}] * size)
        tools_kwargs = non_tensor["tools_kwargs"] if "tools_kwargs" in non_tensor else empty
        interaction_kwargs = non_tensor["interaction_kwargs"] if "interaction_kwargs" in non_tensor else empty
        trajectories = []
        for row in range(size):
            row_tools = dict(tools_kwargs[row] or {})
            unknown = sorted(set(row_tools) - set(self.tools))
            if unknown:
                raise KeyError(
                    f"row {row}: tools_kwargs names tools {unknown} that multi_turn.tool_config_path does not define "
                    f"(defined: {sorted(self.tools)})"
                )
            # A row that names its tools is offered those; a row that names none is offered every tool.
            offered = list(row_tools) if row_tools else list(self.tools)
            schemas = [self.tools[name].tool_schema.model_dump(exclude_none=True) for name in offered]
            messages = [dict(m) for m in list(non_tensor["raw_prompt"][row])]
            prompt_ids = self.chat.render_ids(messages, schemas, add_generation_prompt=True)
            if len(prompt_ids) > self.config.prompt_length:
                raise ValueError(
                    f"row {row}: the prompt with its tool schemas is {len(prompt_ids)} tokens, more than "
                    f"rollout.prompt_length={self.config.prompt_length} (data.max_prompt_length); raise it"
                )
            for _ in range(request.n):
                trajectories.append(
                    Trajectory(
                        row=row,
                        messages=copy.deepcopy(messages),
                        tool_schemas=schemas,
                        tools_kwargs={name: dict(row_tools.get(name) or {}) for name in offered},
                        interaction_kwargs=dict(interaction_kwargs[row] or {}),
                        prompt_ids=prompt_ids,
                        response_budget=request.response_length,
                    )
                )
        return trajectories

    async def _open(self, t: Trajectory) -> None:
        for name, kwargs in t.tools_kwargs.items():
            await self.tools[name].create(t.request_id, **kwargs.get("create_kwargs") or {})
        if self.interaction is not None:
            await self.interaction.start_interaction(t.request_id, **t.interaction_kwargs)

    async def _close(self, t: Trajectory) -> None:
        for name, kwargs in t.tools_kwargs.items():
            tool = self.tools[name]
            t.tool_rewards[name] = float(await tool.calc_reward(t.request_id, **kwargs.get("calc_reward_kwargs") or {}))
            await tool.release(t.request_id, **kwargs.get("release_kwargs") or {})
        if self.interaction is not None:
            await self.interaction.finalize_interaction(t.request_id)

    async def _after_turn(self, t: Trajectory, turn: GeneratedTurn, stop_ids: list[int]) -> None:
        t.add_generated(turn.token_ids, turn.log_probs)
        t.assistant_turns += 1
        text = self.chat.decode(turn.token_ids)
        t.messages.append({"role": "assistant", "content": text})
        stopped = bool(turn.token_ids) and turn.token_ids[-1] in stop_ids
        if not stopped or t.remaining <= 0:
            t.finish("length")
            return
        parsed = self.parser.parse(text) if self.tools else ParsedTurn(content=text)
        max_assistant = self.settings.max_assistant_turns or math.inf
        max_user = self.settings.max_user_turns or math.inf
        if parsed.calls or parsed.errors:
            if t.assistant_turns >= max_assistant:
                t.finish("max_turns")
                return
            responses = await self._call_tools(t, parsed)
            self._append(t, [{"role": "tool", "content": text} for text in responses])
        elif self.interaction is not None and t.user_turns < max_user:
            ended, content, score, _ = await self.interaction.generate_response(
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
        tool = self.tools.get(parsed.name)
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
        tail, added = self.chat.continuation_ids(t.messages, messages, t.tool_schemas)
        t.messages.extend(messages)
        if not t.add_context(tail + added) or t.remaining <= 0:
            t.finish("length")

    # ------------------------------------------------------------------------------------------------ output
    def _to_batch(self, prompts: DataProto, trajectories: list[Trajectory], n: int, pad_id: int) -> DataProto:
        prompt_len, response_len = self.config.prompt_length, self.config.response_length
        size = len(trajectories)
        input_ids = torch.full((size, prompt_len + response_len), pad_id, dtype=torch.long)
        attention = torch.zeros_like(input_ids)
        loss_mask = torch.zeros_like(input_ids)
        log_probs = torch.full((size, response_len), -1.0)
        drift = 0
        for i, t in enumerate(trajectories):
            p, r = len(t.prompt_ids), len(t.response_ids)
            input_ids[i, prompt_len - p : prompt_len] = torch.tensor(t.prompt_ids)
            input_ids[i, prompt_len : prompt_len + r] = torch.tensor(t.response_ids, dtype=torch.long)
            attention[i, prompt_len - p : prompt_len + r] = 1
            loss_mask[i, prompt_len : prompt_len + r] = torch.tensor(t.loss_mask, dtype=torch.long)
            log_probs[i, :r] = torch.tensor([-1.0 if lp is None else lp for lp in t.log_probs])
            drift += not self._matches_template(t)
        position_ids = compute_position_id_with_mask(attention)
        batch = TensorDict(
            {
                "prompts": input_ids[:, :prompt_len],
                "responses": input_ids[:, prompt_len:],
                "input_ids": input_ids,
                "attention_mask": attention,
                "position_ids": position_ids,
                "loss_mask": loss_mask,
            },
            batch_size=size,
        )
        if any(lp is not None for t in trajectories for lp in t.log_probs):
            batch["rollout_log_probs"] = log_probs
        non_tensor = {key: np.repeat(value, n, axis=0) for key, value in prompts.non_tensor_batch.items()}
        non_tensor["messages"] = _object_array([t.messages for t in trajectories])
        non_tensor["reward_scores"] = _object_array([t.reward_scores() for t in trajectories])
        meta = {"rollout_metrics": self._metrics(trajectories, drift)}
        return DataProto(batch=batch, non_tensor_batch=non_tensor, meta_info=meta)

    def _matches_template(self, t: Trajectory) -> bool:
        """Whether the trajectory's ids are what the template gives for its final conversation, with a warning when
        not. ``ignore_strippable`` forgives differences in whitespace only; ``off`` skips the check."""
        mode = self.settings.tokenization_sanity_check_mode
        if mode == "off" or t.stop_reason == "length":
            return True
        ids = t.prompt_ids + t.response_ids
        rendered = self.chat.render_ids(t.messages, t.tool_schemas, add_generation_prompt=False)
        same = rendered[: len(ids)] == ids
        if not same and mode == "ignore_strippable":
            ours, template = (self.chat.tokenizer.decode(x) for x in (ids, rendered))
            same = "".join(template.split()).startswith("".join(ours.split()))
        if not same:
            logger.warning("multi-turn: trajectory %s differs from its re-tokenised conversation", t.request_id)
        return same

    def _metrics(self, trajectories: list[Trajectory], drift: int) -> dict[str, float]:
        count = max(1, len(trajectories))
        return {
            "multi_turn/assistant_turns_mean": sum(t.assistant_turns for t in trajectories) / count,
            "multi_turn/tool_calls_mean": sum(t.tool_calls for t in trajectories) / count,
            "multi_turn/user_turns_mean": sum(t.user_turns for t in trajectories) / count,
            "multi_turn/tool_seconds": self._tool_seconds,
            "multi_turn/engine_calls": float(self._engine_calls),
            "multi_turn/token_drift_trajectories": float(drift),
        }


def _object_array(values: list) -> np.ndarray:
    out = np.empty(len(values), dtype=object)
    out[:] = values
    return out
