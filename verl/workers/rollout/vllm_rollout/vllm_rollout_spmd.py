"""vLLM rollout (SPMD): every worker runs its own in-process vLLM engine on the GPUs (or CPU) it trains on.

The engine starts with dummy weights (``load_format: dummy*``); the actor's weights reach it through
:class:`verl.workers.sharding_manager.fsdp_vllm.FSDPVLLMShardingManager` before each generation. On CPU the engine
runs in this process (``VLLM_ENABLE_V1_MULTIPROCESSING=0``, executor ``uni``) with an explicit KV-cache size.
"""

from __future__ import annotations

import contextlib
import logging
import os
from typing import Any

import numpy as np
import torch
import torch.distributed as dist
from omegaconf import DictConfig
from vllm import LLM, SamplingParams

from verl.protocol import DataProto
from verl.utils.device import is_accelerator_available
from verl.utils.torch_functional import pad_2d_list_to_length
from verl.workers.config import RolloutConfig
from verl.workers.rollout.base import TRAJECTORY_ID, TRAJECTORY_SINK, BaseRollout, SamplingRequest, emit_trajectories
from verl.workers.rollout.hf_rollout import build_rollout_output
from verl.workers.rollout.vllm_cpu import cpu_kv_cache_bytes, cpu_rollout_dtype
from verl.workers.sharding_manager.vllm_cpu_memory import released_bytes

logger = logging.getLogger(__name__)

__all__ = ["vLLMRollout", "_pre_process_inputs", "_repeat_interleave", "cpu_kv_cache_bytes"]

_SAMPLING_FIELDS = frozenset(getattr(SamplingParams, "__struct_fields__", ()) or vars(SamplingParams()).keys())
# Rollout keys that name SamplingParams fields but must not be forwarded: ``seed`` is the engine seed (a per-request
# seed would give every prompt, and every one of its n samples, the same random stream); the rest we set ourselves.
_NOT_FORWARDED = frozenset({"seed", "logprobs", "max_tokens", "detokenize", "stop_token_ids"})


def _pre_process_inputs(pad_token_id: int, prompt_token_ids: torch.Tensor) -> list[int]:
    """Strip the left padding of one prompt row ``(P,)``: the ids from the first non-pad token on."""
    non_pad = torch.nonzero(prompt_token_ids != pad_token_id, as_tuple=False)
    if len(non_pad) == 0:
        return []
    return prompt_token_ids[int(non_pad[0][0]) :].tolist()


def _repeat_interleave(value: torch.Tensor | np.ndarray, repeats: int) -> torch.Tensor | np.ndarray:
    """Repeat every row ``repeats`` times in place order (a, a, b, b) for a tensor or a numpy array."""
    if isinstance(value, torch.Tensor):
        return value.repeat_interleave(repeats, dim=0)
    return np.repeat(value, repeats, axis=0)


def _has_rope_scaling(model_hf_config) -> bool:
    """True when the model scales RoPE (then it may run past ``max_position_embeddings``).

    transformers 5 reports plain RoPE as ``{"rope_type": "default", ...}`` rather than ``None``.
    """
    rope = getattr(model_hf_config, "rope_scaling", None)
    if not rope:
        return False
    kind = rope.get("rope_type", rope.get("type")) if hasattr(rope, "get") else None
    return kind not in (None, "default")


def _supported_engine_kwargs(engine_kwargs: dict) -> dict:
    """Drop ``engine_kwargs.vllm`` keys this vLLM version no longer has (verl's yaml still sets
    ``disable_mm_preprocessor_cache``), with a warning; a key no version knows is an error."""
    import dataclasses

    from vllm.engine.arg_utils import EngineArgs

    known = {f.name for f in dataclasses.fields(EngineArgs)}
    retired = {"disable_mm_preprocessor_cache", "swap_space"}
    kept = {}
    for key, value in engine_kwargs.items():
        if key in known:
            kept[key] = value
        elif key in retired:
            logger.warning("engine_kwargs.vllm.%s is not supported by this vLLM version; ignored", key)
        else:
            raise ValueError(
                f"actor_rollout_ref.rollout.engine_kwargs.vllm.{key} is not an argument of vLLM's engine "
                f"(vllm {getattr(__import__('vllm'), '__version__', '?')})"
            )
    return kept


def _compilation_config(cudagraph_capture_sizes, given) -> dict:
    """vLLM's ``compilation_config``: ``engine_kwargs.vllm.compilation_config`` (a dict or its JSON) with
    ``rollout.cudagraph_capture_sizes``, when set, as its capture sizes."""
    import json

    compilation = dict(json.loads(given) if isinstance(given, str) else given or {})
    if cudagraph_capture_sizes:
        compilation["cudagraph_capture_sizes"] = [int(size) for size in cudagraph_capture_sizes]
    return compilation


def _tokens_and_log_probs(sample) -> tuple[list[int], list[float] | None]:
    """A vLLM ``CompletionOutput``'s token ids and, when it has them, each sampled token's log-prob."""
    tokens = list(sample.token_ids)
    if sample.logprobs is None:
        return tokens, None
    return tokens, [step[tok].logprob for tok, step in zip(tokens, sample.logprobs)]


class vLLMRollout(BaseRollout):
    """Generate with an in-process ``vllm.LLM``; ``config`` is the ``actor_rollout_ref.rollout`` section.
    ``tokenizer_path`` / ``hf_config_path``: local folders of the tokenizer and config.json when they are not
    ``model_path`` (``model.tokenizer_path``, ``model.hf_config_path``).

    Output as :class:`HFRollout`: ``prompts (b, P)``, ``responses (b, T)``, ``input_ids``/``attention_mask``/
    ``position_ids (b, P+T)`` with ``b = B * n`` when sampling (sample ``j`` of prompt ``i`` at row ``i*n + j``),
    plus ``rollout_log_probs (b, T)`` (float32, -1 on padding) when ``calculate_log_probs`` is set.
    """

    def __init__(
        self,
        model_path: str,
        config: RolloutConfig | DictConfig,
        tokenizer,
        model_hf_config,
        *,
        trust_remote_code: bool = False,
        lora_rank: int = 0,
        tokenizer_path: str | None = None,
        hf_config_path: str | None = None,
        **kwargs,
    ):
        super().__init__()
        self.config = config = RolloutConfig.from_config(config)
        self.tokenizer = tokenizer
        self.model_hf_config = model_hf_config
        tp_size = config.tensor_model_parallel_size
        free_cache_engine = config.free_cache_engine
        enforce_eager = config.enforce_eager
        assert enforce_eager or not free_cache_engine, (
            f"rollout.enforce_eager={enforce_eager} with free_cache_engine={free_cache_engine}: "
            "disable CUDA graphs (enforce_eager=True) to free the cache engine"
        )
        world_size = dist.get_world_size() if dist.is_available() and dist.is_initialized() else 1
        assert tp_size <= world_size, (
            f"rollout.tensor_model_parallel_size={tp_size} exceeds the world size {world_size}"
        )
        on_accelerator = is_accelerator_available()
        self._on_accelerator = on_accelerator
        if not on_accelerator and tp_size != 1:
            raise ValueError(
                f"rollout.tensor_model_parallel_size={tp_size}: the in-process CPU engine supports only 1 "
                "(each rank runs its own engine; use data parallelism across ranks)"
            )

        prompt_length = config.prompt_length
        response_length = config.response_length
        max_position = getattr(model_hf_config, "max_position_embeddings", None)
        if not _has_rope_scaling(model_hf_config) and max_position is not None:
            assert max_position >= prompt_length + response_length, (
                f"model max_position_embeddings={max_position} is smaller than rollout.prompt_length "
                f"+ rollout.response_length = {prompt_length + response_length}"
            )
        max_model_len = config.effective_max_model_len
        max_num_batched_tokens = config.max_num_batched_tokens
        enable_chunked_prefill = config.enable_chunked_prefill
        if enable_chunked_prefill and max_num_batched_tokens < max_model_len:
            raise ValueError(
                f"rollout.max_num_batched_tokens={max_num_batched_tokens} must be >= max_model_len={max_model_len} "
                "when enable_chunked_prefill is on; raise max_num_batched_tokens or turn chunked prefill off"
            )
        max_num_seqs = config.max_num_seqs
        dtype = config.dtype if on_accelerator else cpu_rollout_dtype(config.dtype)
        load_format = config.load_format
        gpu_memory_utilization = config.gpu_memory_utilization

        vllm_kwargs = dict(config.engine_kwargs.vllm or {})
        engine_kwargs = {k: v for k, v in vllm_kwargs.items() if v is not None}  # null entries mean "vLLM default"
        engine_kwargs = _supported_engine_kwargs(engine_kwargs)
        # lora_rank > 0 needs nothing here: the hand-off folds the adapter into the base weights (lora_merge).
        limit_images = config.limit_images
        if limit_images:
            engine_kwargs.setdefault("limit_mm_per_prompt", {"image": limit_images})

        # The engine runs in this process: the hybrid engine hands it tensors directly.
        os.environ["VLLM_ENABLE_V1_MULTIPROCESSING"] = "0"
        if on_accelerator:
            # TP > 1: the ranks of a TP group drive one engine together over the existing torch.distributed world
            # (RANK/LOCAL_RANK from the launcher). TP = 1: an independent in-process engine per rank, as on CPU.
            backend = "external_launcher" if tp_size > 1 else "uni"
            # Sleep mode (weights and KV cache released between generations) is what free_cache_engine asks for;
            # the sharding manager sleeps/wakes the engine exactly when it is enabled.
            platform_kwargs = {"enable_sleep_mode": free_cache_engine, "disable_custom_all_reduce": True}
        else:
            backend = "uni"
            platform_kwargs = {}
            if "kv_cache_memory_bytes" not in engine_kwargs and not os.environ.get("VLLM_CPU_KVCACHE_SPACE"):
                # one generate call's sequences, not max_num_seqs (1024) of them: the engines of every rank on this
                # host share gpu_memory_utilization of its available memory with the training processes
                num_seqs = min(max_num_seqs, config.kv_cache_sequences or max_num_seqs)
                engines_on_host = max(1, int(os.environ.get("LOCAL_WORLD_SIZE") or 1) // tp_size)
                platform_kwargs["kv_cache_memory_bytes"] = cpu_kv_cache_bytes(
                    model_hf_config, dtype, max_model_len, num_seqs, gpu_memory_utilization, engines_on_host
                )
            self._pin_cpu_threads(config.cpu_num_threads)

        llm_kwargs = {
            "model": model_path,
            **({"tokenizer": tokenizer_path} if tokenizer_path else {}),
            **({"hf_config_path": hf_config_path} if hf_config_path else {}),
            "tensor_parallel_size": tp_size,
            "distributed_executor_backend": backend,
            "dtype": dtype,
            "enforce_eager": enforce_eager,
            "gpu_memory_utilization": gpu_memory_utilization,
            "skip_tokenizer_init": False,
            "max_model_len": max_model_len,
            "max_num_seqs": max_num_seqs,
            "load_format": "dummy" if load_format.startswith("dummy") else load_format,
            "disable_log_stats": config.disable_log_stats,
            "max_num_batched_tokens": max_num_batched_tokens,
            "enable_chunked_prefill": enable_chunked_prefill,
            "enable_prefix_caching": config.enable_prefix_caching,
            "scheduling_policy": config.scheduling_policy,
            "trust_remote_code": trust_remote_code,
            "seed": config.seed,
            # "processed": log-probs of the temperature-scaled distribution the token was sampled from, which is
            # what the actor recomputes (log_softmax(logits / temperature)).
            "logprobs_mode": config.logprobs_mode,
            **platform_kwargs,
        }
        compilation = _compilation_config(config.cudagraph_capture_sizes, engine_kwargs.pop("compilation_config", None))
        if compilation:
            llm_kwargs["compilation_config"] = compilation
        llm_kwargs.update(engine_kwargs)  # engine_kwargs.vllm has the last word
        self.inference_engine = LLM(**llm_kwargs)
        if on_accelerator and free_cache_engine:
            # The sharding manager wakes the engine up (weights, then KV cache) before each generation.
            self.inference_engine.sleep(level=1)

        self.calculate_log_probs = config.calculate_log_probs
        base = {"n": 1, "max_tokens": response_length, "detokenize": False}
        if self.calculate_log_probs:
            base["logprobs"] = 0  # the sampled token's own log-prob
        for key in config:
            if key in _SAMPLING_FIELDS and key not in _NOT_FORWARDED:
                base[key] = config[key]
        self.sampling_kwargs: dict[str, Any] = base
        self.pad_token_id = tokenizer.pad_token_id if tokenizer is not None else None
        # partial rollout: a weight load may pause the generations in flight at an engine step (WeightGate, see
        # verl/workers/rollout/weight_gate.py); None: every generation runs to its end under one set of weights
        self.gate = None

    @contextlib.contextmanager
    def weights_released(self):
        """Around a weight load while the generations are parked (partial rollout): nothing to release, the engine's
        own weights are loaded in place (the HF rollout closes its cast copies here)."""
        yield

    @staticmethod
    def _pin_cpu_threads(num_threads) -> None:
        """Fix torch's thread count before the engine starts: vLLM's CPU worker then replaces
        ``torch.set_num_threads`` with a no-op and, unless ``OMP_NUM_THREADS`` is set, drops serving to 1 thread."""
        num_threads = int(num_threads) if num_threads else torch.get_num_threads()
        torch.set_num_threads(num_threads)
        os.environ.setdefault("OMP_NUM_THREADS", str(num_threads))

    @property
    def sampling_params(self) -> SamplingParams:
        """The current default sampling parameters (a fresh object; change them with update_sampling_params)."""
        return SamplingParams(**self.sampling_kwargs)

    @contextlib.contextmanager
    def update_sampling_params(self, **kwargs):
        """Temporarily override sampling fields (``temperature=0, n=1`` ...); unknown names are ignored."""
        old = dict(self.sampling_kwargs)
        for key, value in kwargs.items():
            if key in _SAMPLING_FIELDS:
                self.sampling_kwargs[key] = value
        try:
            yield
        finally:
            self.sampling_kwargs = old

    def _request_overrides(self, meta: dict) -> dict:
        """The sampling fields of this call (see `SamplingRequest`); greedy also switches min_p off."""
        current = self.sampling_kwargs
        request = SamplingRequest.resolve(
            meta,
            self.config,
            **{key: current[key] for key in ("temperature", "top_p", "top_k", "n") if key in current},
            response_length=current["max_tokens"],
        )
        return {**self._sampling_fields(request), "n": request.n, "max_tokens": request.response_length}

    @staticmethod
    def _sampling_fields(request: SamplingRequest) -> dict:
        """The ``SamplingParams`` fields a request sets; greedy also switches min_p off."""
        fields = {"temperature": request.temperature, "top_p": request.top_p, "top_k": request.top_k}
        if not request.do_sample:
            fields["min_p"] = 0.0
        return fields

    def _require_engine_memory(self) -> None:
        """Refuse to generate while the hand-off has the CPU engine's memory released (``free_cache_engine``): its
        weights are gone until the sharding manager reloads them, and a failed engine step leaves its requests
        behind in the engine."""
        if not self._on_accelerator and any(self.inference_engine.collective_rpc(released_bytes)):
            raise RuntimeError(
                "the vLLM engine's weights and KV cache are released between generations "
                "(actor_rollout_ref.rollout.free_cache_engine=True on CPU); generate inside the rollout sharding "
                "manager, which reloads them, or set free_cache_engine=False"
            )

    @torch.no_grad()
    def generate_sequences(self, prompts: DataProto, **kwargs) -> DataProto:
        """Generate for left-padded ``input_ids``/``attention_mask``/``position_ids`` ``(B, P)``.

        meta_info: ``eos_token_id``, ``pad_token_id`` (required), ``do_sample``, ``validate``, optional
        ``response_length``; non-tensor ``raw_prompt_ids`` (derived from the mask if absent) and
        ``multi_modal_data``. ``kwargs`` override sampling fields for this call.
        """
        meta = prompts.meta_info
        for key in ("eos_token_id", "pad_token_id"):
            if key not in meta:
                raise KeyError(f"prompts.meta_info[{key!r}] is required by vLLMRollout (the worker sets it)")
        eos_token_id, pad_token_id = meta["eos_token_id"], meta["pad_token_id"]
        idx = prompts.batch["input_ids"]
        attention_mask = prompts.batch["attention_mask"]
        position_ids = prompts.batch["position_ids"]
        batch_size = idx.size(0)

        non_tensor = dict(prompts.non_tensor_batch)
        raw_prompt_ids = non_tensor.pop("raw_prompt_ids", None)
        if raw_prompt_ids is None:
            # The mask, not the pad id, marks the prompt: a pad id may also be a real token (e.g. EOS as pad).
            raw_prompt_ids = [row[m.bool()].tolist() for row, m in zip(idx, attention_mask)]
        if len(raw_prompt_ids) != batch_size:
            raise RuntimeError(
                f"non_tensor_batch['raw_prompt_ids'] has {len(raw_prompt_ids)} rows but input_ids has {batch_size}"
            )
        multi_modal_data = non_tensor.pop("multi_modal_data", None)
        # the processed tensors are the trainer's (for log-probs); vLLM reads the images from multi_modal_data
        non_tensor.pop("multi_modal_inputs", None)
        inputs = []
        for i, ids in enumerate(raw_prompt_ids):
            if isinstance(ids, np.ndarray | torch.Tensor):
                ids = ids.tolist()
            elif not isinstance(ids, list | tuple):
                raise TypeError(f"raw_prompt_ids[{i}] is a {type(ids).__name__}; expected a list or np.ndarray")
            entry: dict[str, Any] = {"prompt_token_ids": [int(t) for t in ids]}
            if multi_modal_data is not None and multi_modal_data[i] is not None:
                entry["multi_modal_data"] = multi_modal_data[i]
            inputs.append(entry)

        overrides = self._request_overrides(meta)
        overrides.update(kwargs)
        with self.update_sampling_params(**overrides):
            params = dict(self.sampling_kwargs)
        response_length = int(params["max_tokens"])
        if not params["ignore_eos"]:
            # Stop exactly at the EOS the response mask is built from (meta_info), not at the engine's own
            # generation-config EOS: ignore_eos switches the latter off, stop_token_ids installs the former.
            eos_ids = list(eos_token_id) if isinstance(eos_token_id, list | tuple) else [eos_token_id]
            params["ignore_eos"] = True
            params["stop_token_ids"] = [int(t) for t in eos_ids if t is not None]
        n = int(params["n"])
        self._require_engine_memory()
        sampling = SamplingParams(**params)

        def build(outputs: list, rows: slice = slice(None), versions=None) -> DataProto:
            tensors = (idx[rows], attention_mask[rows], position_ids[rows])
            fields = {key: value[rows] for key, value in non_tensor.items()}
            out = self._build_output(outputs, *tensors, fields, n, response_length, eos_token_id, pad_token_id)
            if versions is not None:  # partial rollout: the version that sampled each token, -1 past the response
                padded = torch.tensor([v + [-1] * (response_length - len(v)) for v in versions], dtype=torch.long)
                response_mask = out.batch["attention_mask"][:, -response_length:].bool().cpu()
                out.batch["weight_versions"] = torch.where(response_mask, padded, -1).to(idx.device)
            return out

        sink = meta.get(TRAJECTORY_SINK)
        if self.gate is not None and multi_modal_data is None:  # multimodal inputs are not re-fed on a resume
            single = {**params, "n": 1}
            prompts_ids = [entry["prompt_token_ids"] for entry in inputs for _ in range(n)]  # sample j at i*n + j

            def finished(row: int, samples: list) -> None:
                i = row // n
                if sink is not None and all(len(s) for s in samples[i * n : (i + 1) * n]):
                    rows = [s[-1] for s in samples[i * n : (i + 1) * n]]
                    part = build([[(t, lp) for t, lp, _ in rows]], slice(i, i + 1), [v for _, _, v in rows])
                    emit_trajectories(sink, non_tensor[TRAJECTORY_ID][i : i + 1], 0, part)

            results = self._generate_gated(prompts_ids, [single] * len(prompts_ids), finished)
            grouped = [[(t, lp) for t, lp, _ in results[i * n : (i + 1) * n]] for i in range(batch_size)]
            return build(grouped, versions=[v for _, _, v in results])
        # under a gate, a generation that is never paused (multimodal) still holds a weight load off until it ends
        with self.gate.running() if self.gate is not None else contextlib.nullcontext():
            if sink is None:
                return build(self.inference_engine.generate(prompts=inputs, sampling_params=sampling, use_tqdm=False))

            # the reward loop scores each prompt's samples as soon as the last of them finishes
            def emit(i: int, output) -> None:
                emit_trajectories(sink, non_tensor[TRAJECTORY_ID][i : i + 1], 0, build([output], slice(i, i + 1)))

            return build(self._generate_reporting_each(inputs, sampling, emit))

    def _generate_reporting_each(self, inputs: list[dict], sampling: SamplingParams, on_finished) -> list:
        """``LLM.generate`` (the same requests, hence the same samples), calling ``on_finished(prompt_index,
        output)`` from inside its engine loop as each request finishes, while the others keep generating."""
        llm = self.inference_engine
        engine = llm.llm_engine
        first_id = llm.request_counter.counter  # LLM numbers this call's requests from here, in prompt order
        engine_step = engine.step

        def step():
            outputs = engine_step()
            for output in outputs:
                if output.finished:
                    on_finished(int(output.request_id) - first_id, output)
            return outputs

        engine.step = step
        try:
            return llm.generate(prompts=inputs, sampling_params=sampling, use_tqdm=False)
        finally:
            del engine.step  # the class's method again

    def _generate_gated(self, prompts: list[list[int]], params: list[dict], on_finished=None) -> list[tuple]:
        """Generate one sample per token-id prompt (``params``: its ``SamplingParams`` fields, ``n`` 1) while
        ``self.gate`` may pause them after any engine step: the unfinished requests are aborted keeping their tokens,
        the weights load (:meth:`WeightGate.swap`), and each is resubmitted as prompt + tokens so far with what is
        left of its budget, recomputed under the new weights (the load resets the prefix cache).

        Returns ``(token ids, log-probs or None, versions)`` per prompt, ``versions`` the gate's version in force
        when the segment that sampled each token started. ``on_finished(row, samples)`` is called as each request
        finishes (``samples[row]``: a list whose last item is that row's result; empty while unfinished).
        """
        from vllm.sampling_params import RequestOutputKind

        engine = self.inference_engine.llm_engine
        gate = self.gate
        want_log_probs = self.calculate_log_probs
        tokens = [[] for _ in prompts]
        log_probs = [[] for _ in prompts]
        versions = [[] for _ in prompts]
        results: list[list] = [[] for _ in prompts]
        pending = list(range(len(prompts)))
        segment = 0
        while pending:
            with gate.running():
                version = gate.version
                rows, base, unfinished = {}, {}, {}
                for i in pending:
                    fields = dict(params[i])
                    done = len(tokens[i])
                    fields["max_tokens"] = int(fields["max_tokens"]) - done
                    if fields.get("min_tokens"):
                        fields["min_tokens"] = max(0, int(fields["min_tokens"]) - done)
                    fields["output_kind"] = RequestOutputKind.CUMULATIVE  # the segment's tokens at every step
                    request_id = f"partial-{id(self)}-{segment}-{i}"
                    internal = engine.add_request(
                        request_id, {"prompt_token_ids": list(prompts[i]) + tokens[i]}, SamplingParams(**fields)
                    )
                    rows[request_id] = rows[internal] = i
                    base[i], unfinished[i] = done, internal
                stopped = False
                try:
                    while unfinished:
                        for output in engine.step():
                            i = rows[output.request_id]
                            new, new_log_probs = _tokens_and_log_probs(output.outputs[0])
                            keep = base[i]
                            tokens[i] = tokens[i][:keep] + new
                            versions[i] = versions[i][:keep] + [version] * len(new)
                            if want_log_probs:
                                log_probs[i] = log_probs[i][:keep] + new_log_probs
                            if output.finished:
                                unfinished.pop(i, None)
                                results[i].append((tokens[i], log_probs[i] if want_log_probs else None, versions[i]))
                                if on_finished is not None:
                                    on_finished(i, results)
                        if unfinished and gate.step():
                            stopped = True
                            break
                except BaseException:
                    engine.abort_request(list(unfinished.values()), internal=True)  # leave nothing in the engine
                    raise
                if stopped:  # keep the tokens sampled so far, free the requests' KV cache before the load
                    engine.abort_request(list(unfinished.values()), internal=True)
            pending = sorted(unfinished)
            segment += 1
            if pending:
                gate.park()  # outside running(): the swap loads now; go on under the new weights
        return [result[-1] for result in results]

    def _build_output(
        self, outputs, idx, attention_mask, position_ids, non_tensor: dict, n, response_length, eos_token_id, pad_id
    ) -> DataProto:
        """The rollout's rows for ``outputs`` (one ``RequestOutput`` per prompt row of ``idx``, each with ``n``
        samples): prompts repeated ``n`` times (interleaved), responses padded to ``response_length``."""
        responses, log_probs = [], []
        for output in outputs:
            # a RequestOutput, or (partial rollout) a list of (token ids, log-probs) for its samples
            samples = output if isinstance(output, list) else [_tokens_and_log_probs(s) for s in output.outputs]
            for tokens, sample_log_probs in samples:
                responses.append(tokens)
                if self.calculate_log_probs:
                    log_probs.append(sample_log_probs)
        response = pad_2d_list_to_length(responses, pad_id, max_length=response_length).to(idx.device)
        if n > 1:
            idx = _repeat_interleave(idx, n)
            attention_mask = _repeat_interleave(attention_mask, n)
            position_ids = _repeat_interleave(position_ids, n)
            non_tensor = {key: _repeat_interleave(value, n) for key, value in non_tensor.items()}
        batch = build_rollout_output(idx, attention_mask, position_ids, response.to(idx.dtype), eos_token_id)
        if self.calculate_log_probs:
            padded = [lp + [-1.0] * (response_length - len(lp)) for lp in log_probs]
            batch["rollout_log_probs"] = torch.tensor(padded, dtype=torch.float32, device=idx.device)
        return DataProto(batch=batch, non_tensor_batch=non_tensor)

    def turn_params(self, request: SamplingRequest, stop_token_ids: list[int], max_tokens: int) -> SamplingParams:
        """Sampling of one assistant turn: the batch's request, one sample, stopping at ``stop_token_ids``."""
        return SamplingParams(**self._turn_fields(request, stop_token_ids, max_tokens))

    def _turn_fields(self, request: SamplingRequest, stop_token_ids: list[int], max_tokens: int) -> dict:
        params = {**self.sampling_kwargs, **self._sampling_fields(request), "n": 1}
        stops = [int(t) for t in stop_token_ids]
        params.update(ignore_eos=True, stop_token_ids=stops, max_tokens=max(1, int(max_tokens)))
        return params

    def turn_from_sample(self, sample):
        """A ``GeneratedTurn`` from one vLLM completion (with its log-probs when ``calculate_log_probs``)."""
        from verl.multi_turn.turn_engine import GeneratedTurn

        tokens = list(sample.token_ids)
        log_probs = None
        if self.calculate_log_probs:
            log_probs = [step[tok].logprob for tok, step in zip(tokens, sample.logprobs)]
        return GeneratedTurn(tokens, log_probs)

    @torch.no_grad()
    def generate_turns(
        self, prompts: list[list[int]], max_tokens: list[int], request: SamplingRequest, stop_token_ids: list[int]
    ) -> list:
        """One assistant turn per token-id prompt (a batched engine call of the agent loops), each stopping at a
        stop token or its own ``max_tokens``; with ``calculate_log_probs`` the sampled tokens' log-probs too."""
        from verl.multi_turn.turn_engine import GeneratedTurn

        self._require_engine_memory()
        if self.gate is not None:  # partial rollout: a weight load may pause the turns; tokens carry versions
            fields = [self._turn_fields(request, stop_token_ids, m) for m in max_tokens]
            results = self._generate_gated([list(p) for p in prompts], fields)
            return [GeneratedTurn(tokens, log_probs, versions) for tokens, log_probs, versions in results]
        sampling = [self.turn_params(request, stop_token_ids, m) for m in max_tokens]
        outputs = self.inference_engine.generate(
            prompts=[{"prompt_token_ids": list(p)} for p in prompts], sampling_params=sampling, use_tqdm=False
        )
        return [self.turn_from_sample(output.outputs[0]) for output in outputs]

    def turn_server(self, request: SamplingRequest, stop_token_ids: list[int]):
        """The async mode's server: each turn is its own engine request, continuously batched."""
        from verl.workers.rollout.vllm_rollout.continuous_batcher import ContinuousBatcher

        self._require_engine_memory()
        return ContinuousBatcher(self, request, stop_token_ids)
