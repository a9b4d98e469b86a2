"""The agent-loop rollout: every trajectory is its own coroutine, played by the agent loop its row names.

Used for ``rollout.multi_turn.enable=True`` (rows play ``tool_agent`` unless they name another loop) and for
``rollout.mode=async`` (rows play ``rollout.agent.default_agent_loop`` or their ``agent_name``). The loops await a
turn server for each assistant turn:

* ``TurnBatcher`` (sync mode, and the HF engine in async mode): the turns that are ready go to the engine together,
  in one ``generate_turns`` call;
* the engine's own server when it has one (``turn_server``; vLLM's ``ContinuousBatcher`` in async mode): each turn
  is a request of its own that joins the running batch at the next engine step, so a long turn never holds back
  another trajectory's next one.

The output has the single-turn rollout's columns plus ``loss_mask`` (1 only on generated tokens), and the
non-tensor ``messages``, ``reward_scores`` and ``agent_loop_metrics`` (see ``pop_agent_loop_metrics``).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import threading

import numpy as np
import torch
from tensordict import TensorDict

from verl.multi_turn.chat_template import ChatTemplate
from verl.multi_turn.tool_parser import get_tool_parser
from verl.multi_turn.turn_batcher import TurnBatcher
from verl.multi_turn.turn_engine import GeneratedTurn, TurnEngine
from verl.protocol import DataProto
from verl.utils.distributed import adopt_worker_threads
from verl.utils.model import compute_position_id_with_mask
from verl.workers.config import RolloutConfig
from verl.workers.rollout.base import TRAJECTORY_ID, TRAJECTORY_SINK, BaseRollout, SamplingRequest, emit_trajectories

logger = logging.getLogger(__name__)

__all__ = [
    "AGENT_LOOP_METRICS",
    "AgentLoopRollout",
    "GeneratedTurn",
    "MultiTurnRollout",
    "TurnEngine",
    "pop_agent_loop_metrics",
]

AGENT_LOOP_METRICS = "agent_loop_metrics"  # the output's per-trajectory metrics column
# meta_info key: the row columns lent to the agent loops for reading, left out of the output (the trainer keeps them)
ROW_CONTEXT_KEYS = "row_context_keys"


class AgentLoopRollout(BaseRollout):
    """Wraps an engine rollout; ``config`` is the ``actor_rollout_ref.rollout`` section.

    ``tools`` / ``interaction`` default to the ones the ``multi_turn`` config files name (with
    ``multi_turn.enable``); agent loops listed in ``agent.agent_loop_config_path`` are registered here.
    """

    def __init__(self, engine: TurnEngine, config, tokenizer, tools: list | None = None, interaction=None):
        from verl.multi_turn.agent_loop import get_agent_loop_class, load_agent_loop_config

        self.engine = engine
        self.config = RolloutConfig.from_config(config)
        settings = self.config.multi_turn
        self.chat = ChatTemplate(tokenizer)
        if settings.enable:
            get_tool_parser(settings.format)  # an unknown format fails here, not at the first tool call
            if tools is None and settings.tool_config_path:
                from verl.multi_turn.tools.utils.tool_registry import initialize_tools_from_config

                tools = initialize_tools_from_config(settings.tool_config_path)
            if interaction is None and settings.interaction_config_path:
                from verl.multi_turn.interactions.utils.interaction_registry import initialize_interaction_from_config

                interaction = initialize_interaction_from_config(settings.interaction_config_path)
        self.tools = {tool.name: tool for tool in tools or []}
        self.interaction = interaction
        agent = self.config.agent
        if agent.agent_loop_config_path:
            load_agent_loop_config(agent.agent_loop_config_path)
        self.default_agent = agent.default_agent_loop or ("tool_agent" if settings.enable else "single_turn_agent")
        get_agent_loop_class(self.default_agent)
        # In async mode an engine that serves single requests (vLLM) does so; otherwise turns are batched.
        self.continuous = self.config.mode == "async" and hasattr(engine, "turn_server")
        # One event loop on a thread of its own plays every call's trajectories, so calls from several threads (the
        # fully async trainer keeps more than one batch in flight, and validates meanwhile) share the engine: turns
        # that sample alike go to it together. Started on the first call.
        self._loop: asyncio.AbstractEventLoop | None = None
        self._loop_lock = threading.Lock()
        self._batcher: TurnBatcher | None = None
        self._serving = None

    @property
    def concurrent_generation(self) -> bool:
        """Whether ``generate_sequences`` may be called from several threads at once (batched turns: the engine
        is only called from the loop's thread)."""
        return not self.continuous

    # ------------------------------------------------------------------------------------------------ public
    def generate_sequences(self, prompts: DataProto) -> DataProto:
        """Play every prompt's ``n`` trajectories to the end (non-tensor ``raw_prompt`` required)."""
        # The HF engine unshards an FSDP module here, once for every turn of the batch.
        with getattr(self.engine, "generation_context", contextlib.nullcontext)():
            return asyncio.run_coroutine_threadsafe(self._generate(prompts), self._event_loop()).result()

    def _event_loop(self) -> asyncio.AbstractEventLoop:
        with self._loop_lock:
            if self._loop is None:
                self._loop = asyncio.new_event_loop()
                threading.Thread(
                    target=_run_forever, args=(self._loop,), name="agent-loop-rollout", daemon=True
                ).start()
            return self._loop

    def _shared_batcher(self) -> TurnBatcher:
        """The batcher every call's trajectories share, served by one task (on the loop's thread)."""
        if self._batcher is None:
            self._batcher = TurnBatcher(self.engine)
            self._serving = asyncio.ensure_future(self._batcher.serve())
        return self._batcher

    # ------------------------------------------------------------------------------------------------ the loops
    async def _generate(self, prompts: DataProto) -> DataProto:
        from verl.multi_turn.agent_loop import AgentLoopContext

        meta = prompts.meta_info
        for key in ("eos_token_id", "pad_token_id"):
            if key not in meta:
                raise KeyError(f"prompts.meta_info[{key!r}] is required by the agent-loop rollout (the worker sets it)")
        eos = meta["eos_token_id"]
        stop_ids = sorted({int(t) for t in (eos if isinstance(eos, list | tuple) else [eos]) if t is not None})
        if self.chat.end_of_turn_id is not None and self.chat.end_of_turn_id not in stop_ids:
            stop_ids.append(self.chat.end_of_turn_id)
        request = SamplingRequest.resolve(meta, self.config)
        loop_classes = self._loop_classes(prompts)
        size = len(loop_classes) * request.n
        # partial rollout (the engine has a WeightGate): turns are batched, whose decode loops a weight load can pause
        if self.continuous and getattr(self.engine, "gate", None) is None:
            server = self.engine.turn_server(request, stop_ids)
            serving = asyncio.ensure_future(server.serve())
        else:
            server, serving = self._shared_batcher().stream(request, stop_ids, live=size), None
        context = AgentLoopContext(server, self.chat, self.config, request, stop_ids, self.tools, self.interaction)
        fields = {k: v for k, v in prompts.non_tensor_batch.items() if k != TRAJECTORY_ID}
        # the reward loop's sink: each trajectory is handed over as it finishes (see TRAJECTORY_SINK)
        sink = prompts.meta_info.get(TRAJECTORY_SINK)
        emit = (lambda row, sample, out: self._emit(sink, prompts, row, sample, out)) if sink is not None else None
        plays = [
            asyncio.ensure_future(
                self._play(cls(context, row), {k: v[row] for k, v in fields.items()}, server, emit, sample)
            )
            for row, cls in enumerate(loop_classes)
            for sample in range(request.n)
        ]
        try:
            outputs = await asyncio.gather(*plays)
        except BaseException:
            for play in plays:  # no trajectory of a failed batch keeps running into the next call
                play.cancel()
            await asyncio.gather(*plays, return_exceptions=True)
            raise
        finally:
            if serving is not None:
                serving.cancel()
                await asyncio.gather(serving, return_exceptions=True)
        return self._to_batch(prompts, outputs, request.n, int(meta["pad_token_id"]), server.engine_calls)

    def _loop_classes(self, prompts: DataProto) -> list:
        from verl.multi_turn.agent_loop import get_agent_loop_class

        non_tensor = prompts.non_tensor_batch
        if "raw_prompt" not in non_tensor:
            raise KeyError(
                "the agent-loop rollout needs the chat messages of each prompt (non_tensor_batch['raw_prompt']); "
                "set data.return_raw_chat=True"
            )
        names = non_tensor["agent_name"] if "agent_name" in non_tensor else [None] * len(prompts)
        classes = []
        for row, name in enumerate(names):
            try:
                classes.append(get_agent_loop_class(str(name) if name else self.default_agent))
            except KeyError as e:
                raise KeyError(f"row {row}: {e.args[0]}") from None
        return classes

    async def _play(self, agent_loop, row_fields: dict, server, emit=None, sample: int = 0):
        try:
            output = await agent_loop.run(**row_fields)
        finally:
            server.finished()
        self._check_output(agent_loop, output)
        if emit is not None:
            emit(agent_loop.row, sample, output)
        return output

    def _emit(self, sink, prompts: DataProto, row: int, sample: int, output) -> None:
        """Hand one finished trajectory to the reward loop's sink, as the row ``_to_batch`` will give it."""
        pad_id = int(prompts.meta_info["pad_token_id"])
        rows = self._to_batch(prompts.select_idxs([row]), [output], 1, pad_id, 0)
        rows.non_tensor_batch.pop(AGENT_LOOP_METRICS)
        emit_trajectories(sink, prompts.non_tensor_batch[TRAJECTORY_ID][row : row + 1], sample, rows)

    def _check_output(self, agent_loop, output) -> None:
        name = type(agent_loop).__name__
        response_len = self.config.response_length
        agent_loop.checked_prompt(output.prompt_ids)  # again: a user's loop may not have checked it
        if len(output.response_ids) > response_len or len(output.response_mask) != len(output.response_ids):
            raise ValueError(
                f"row {agent_loop.row}: {name} returned {len(output.response_ids)} response ids with a mask of "
                f"{len(output.response_mask)}; expected equal lengths of at most rollout.response_length={response_len}"
            )

    # ------------------------------------------------------------------------------------------------ output
    def _to_batch(self, prompts: DataProto, outputs: list, n: int, pad_id: int, engine_calls: int) -> DataProto:
        prompt_len, response_len = self.config.prompt_length, self.config.response_length
        size = len(outputs)
        input_ids = torch.full((size, prompt_len + response_len), pad_id, dtype=torch.long)
        attention = torch.zeros_like(input_ids)
        loss_mask = torch.zeros_like(input_ids)
        log_probs = torch.full((size, response_len), -1.0)
        versions = torch.full((size, response_len), -1, dtype=torch.long)
        has_log_probs = has_versions = False
        for i, out in enumerate(outputs):
            p, r = len(out.prompt_ids), len(out.response_ids)
            input_ids[i, prompt_len - p : prompt_len] = torch.tensor(out.prompt_ids, dtype=torch.long)
            input_ids[i, prompt_len : prompt_len + r] = torch.tensor(out.response_ids, dtype=torch.long)
            attention[i, prompt_len - p : prompt_len + r] = 1
            loss_mask[i, prompt_len : prompt_len + r] = torch.tensor(out.response_mask, dtype=torch.long)
            if out.response_logprobs is not None:
                values = [-1.0 if lp is None else lp for lp in out.response_logprobs]
                has_log_probs |= any(lp is not None for lp in out.response_logprobs)
                log_probs[i, : len(values)] = torch.tensor(values)
            if out.response_versions is not None and any(v >= 0 for v in out.response_versions):
                has_versions = True
                versions[i, : len(out.response_versions)] = torch.tensor(out.response_versions, dtype=torch.long)
        batch = TensorDict(
            {
                "prompts": input_ids[:, :prompt_len],
                "responses": input_ids[:, prompt_len:],
                "input_ids": input_ids,
                "attention_mask": attention,
                "position_ids": compute_position_id_with_mask(attention),
                "loss_mask": loss_mask,
            },
            batch_size=size,
        )
        if has_log_probs:
            batch["rollout_log_probs"] = log_probs
        if has_versions:  # partial rollout: the weight version that sampled each response token (-1 elsewhere)
            batch["weight_versions"] = versions
        lent = prompts.meta_info[ROW_CONTEXT_KEYS] if ROW_CONTEXT_KEYS in prompts.meta_info else []
        non_tensor = {k: np.repeat(v, n, axis=0) for k, v in prompts.non_tensor_batch.items() if k not in lent}
        non_tensor["messages"] = _object_array([out.messages for out in outputs])
        non_tensor["reward_scores"] = _object_array([out.reward_scores for out in outputs])
        non_tensor[AGENT_LOOP_METRICS] = _object_array(_row_metrics(outputs, engine_calls))
        return DataProto(batch=batch, non_tensor_batch=non_tensor)


MultiTurnRollout = AgentLoopRollout  # the name of the sync multi-turn rollout before agent loops


def _run_forever(loop: asyncio.AbstractEventLoop) -> None:
    """The agent-loop thread: engine calls run here, with the worker's CPU thread count (not the process default)."""
    adopt_worker_threads()
    loop.run_forever()


def _row_metrics(outputs: list, engine_calls: int) -> list[dict[str, float]]:
    """Each trajectory's figures, carried as a non-tensor column so that every rank's rows reach the trainer
    (``meta_info`` of a data-parallel call is the first rank's only); ``engine_calls`` is shared out over the
    rank's rows so that the column sums to the engine calls of all ranks."""
    share = engine_calls / max(1, len(outputs))
    return [
        {
            "assistant_turns": float(out.num_turns),
            "user_turns": float(out.user_turns),
            "tool_calls": float(out.tool_calls),
            "tool_seconds": float(out.tool_seconds),
            "token_drift": float(out.template_drift),
            "engine_calls": share,
            **{f"agent_loop/{key}": float(value) for key, value in out.metrics.items()},
        }
        for out in outputs
    ]


def pop_agent_loop_metrics(batch: DataProto) -> dict[str, float]:
    """The step metrics of an agent-loop rollout's output (empty for another rollout), its metrics column popped.

    ``multi_turn/*``: turns, user turns and tool calls per trajectory (means), seconds spent waiting on tools and
    engine calls (totals over all ranks), trajectories whose ids differ from the re-templated conversation (count);
    ``agent_loop/<key>``: a loop's own metrics, averaged over the trajectories that report them.
    """
    rows = batch.non_tensor_batch.pop(AGENT_LOOP_METRICS, None)
    if rows is None or len(rows) == 0:
        return {}
    count = len(rows)
    total = {key: sum(row[key] for row in rows) for key in ("assistant_turns", "user_turns", "tool_calls")}
    metrics = {f"multi_turn/{key}_mean": value / count for key, value in total.items()}
    metrics["multi_turn/tool_seconds"] = sum(row["tool_seconds"] for row in rows)
    metrics["multi_turn/engine_calls"] = float(round(sum(row["engine_calls"] for row in rows)))
    metrics["multi_turn/token_drift_trajectories"] = sum(row["token_drift"] for row in rows)
    own: dict[str, list[float]] = {}
    for row in rows:
        for key, value in row.items():
            if key.startswith("agent_loop/"):
                own.setdefault(key, []).append(value)
    metrics.update({key: sum(values) / len(values) for key, values in own.items()})
    return metrics


def _object_array(values: list) -> np.ndarray:
    out = np.empty(len(values), dtype=object)
    out[:] = values
    return out
