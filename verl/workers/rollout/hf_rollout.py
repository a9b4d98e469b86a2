"""Rollout with HuggingFace ``generate`` on the training module itself (no separate inference engine)."""

from __future__ import annotations

import contextlib
import copy
import threading

import numpy as np
import torch
import torch.nn as nn
from omegaconf import DictConfig
from tensordict import TensorDict
from transformers import GenerationConfig, LogitsProcessorList, StoppingCriteria, StoppingCriteriaList

from verl.protocol import DataProto
from verl.utils.device import get_torch_device, is_accelerator_available
from verl.utils.fsdp_utils import fsdp2_full_params, fsdp_version
from verl.utils.torch_functional import get_response_mask
from verl.workers.config import RolloutConfig
from verl.workers.engine.fsdp.hf_forward import autocast_context
from verl.workers.rollout.base import BaseRollout, SamplingRequest
from verl.workers.rollout.categorical_sampler import CategoricalSampler, sampling_warpers

__all__ = ["HFRollout", "build_rollout_output", "sampled_log_probs", "weights_cast_to"]

# a vision-language model config's placeholder token ids: each stands for one image (or video) feature
_VISION_PLACEHOLDERS = ("image_token_id", "video_token_id", "image_token_index")
# a greedy generate's sampling settings, explicit and neutral: generate fills the ones left None from the model's
# generation config (an instruct model's temperature, top-k, top-p) and then warns that a greedy run ignores them
_GREEDY_NEUTRAL = {"temperature": 1.0, "top_k": 50, "top_p": 1.0}
# sampling-only settings of a generation config that the CPU sampler does not apply, with their neutral values
_OTHER_WARPERS = {"min_p": None, "top_h": None, "typical_p": 1.0, "epsilon_cutoff": 0.0, "eta_cutoff": 0.0}


def build_rollout_output(
    prompt_ids: torch.Tensor,
    prompt_mask: torch.Tensor,
    prompt_pos: torch.Tensor,
    responses: torch.Tensor,
    eos_token_id,
) -> TensorDict:
    """Assemble verl's rollout batch from (already repeated) prompts and right-padded responses.

    prompt_* ``(b, P)`` left-padded (position ids may be mrope ``(b, 3, P)``); responses ``(b, T)``. The response
    mask is 1 through the first EOS; response position ids continue from the last prompt position (also past EOS).
    Returns a TensorDict with ``prompts``, ``responses`` ``(b, T)`` and ``input_ids``, ``attention_mask``,
    ``position_ids`` ``(b, P+T)`` (mrope ``(b, 3, P+T)``).
    """
    batch_size, response_length = responses.shape
    delta = torch.arange(1, response_length + 1, device=prompt_pos.device, dtype=prompt_pos.dtype)
    # (b, 1) or mrope (b, 3, 1) + (T,): every rope axis advances by one per response token
    response_pos = prompt_pos[..., -1:] + delta
    response_mask = get_response_mask(responses, eos_token=eos_token_id, dtype=prompt_mask.dtype)
    return TensorDict(
        {
            "prompts": prompt_ids,
            "responses": responses,
            "input_ids": torch.cat([prompt_ids, responses], dim=-1),
            "attention_mask": torch.cat([prompt_mask, response_mask], dim=-1),
            "position_ids": torch.cat([prompt_pos, response_pos], dim=-1),
        },
        batch_size=batch_size,
    )


def sampled_log_probs(scores: tuple[torch.Tensor, ...], tokens: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """Log-probs of the sampled ``tokens`` ``(b, T)`` under the distributions they were drawn from.

    ``scores``: HF ``generate``'s processed logits, one ``(b, vocab)`` tensor per step (temperature, top-k and top-p
    applied, as sampled). Returns float32 ``(b, T)``, -1 where ``mask`` is 0 (after EOS, or steps never taken), as
    vLLM pads them.
    """
    out = torch.full(tokens.shape, -1.0, dtype=torch.float32)
    for step, step_scores in enumerate(scores[: tokens.size(1)]):
        log_probs = torch.log_softmax(step_scores.float(), dim=-1)
        out[:, step] = log_probs.gather(-1, tokens[:, step : step + 1].to(log_probs.device)).squeeze(-1).cpu()
    return torch.where(mask.bool().cpu(), out, torch.full_like(out, -1.0)).to(tokens.device)


@contextlib.contextmanager
def weights_cast_to(module: nn.Module, dtype: torch.dtype):
    """Inside, ``module``'s floating-point parameters are ``dtype`` copies; the originals (fp32 masters, or an
    unsharded FSDP view) are put back untouched on the way out. Tied weights stay tied (one parameter object)."""
    saved = [(p, p.data) for p in module.parameters() if p.is_floating_point() and p.dtype != dtype]
    try:
        for param, data in saved:
            param.data = data.to(dtype)
        yield
    finally:
        for param, data in saved:
            param.data = data


class HFRollout(BaseRollout):
    """Sample responses with ``module.generate``; ``config`` is the ``actor_rollout_ref.rollout`` section.

    Output per prompt batch ``B``: ``B * n`` rows when sampling (sample ``j`` of prompt ``i`` at row ``i*n + j``),
    ``B`` rows when greedy (``do_sample=False``) or validating (the trainer repeats by ``val_kwargs.n`` itself).
    """

    def __init__(self, module: nn.Module, config: RolloutConfig | DictConfig):
        super().__init__()
        self.config = RolloutConfig.from_config(config)
        self.module = module
        # partial rollout (a standalone worker sets it): a weight load pauses the decode loops in flight, see
        # verl/workers/rollout/weight_gate.py; None: every generation runs to its end under one set of weights
        self.gate = None
        self._context: contextlib.ExitStack | None = None
        self._context_users = 0
        # a weight load on another thread (partial rollout) closes and reopens the context: one at a time
        self._context_lock = threading.RLock()
        # on CPU the weights decode in this dtype (None: as loaded, rollout.dtype=auto); decided, and logged, once
        self._cpu_decode_dtype = None
        if not is_accelerator_available():
            from verl.workers.rollout.vllm_cpu import cpu_rollout_dtype

            self._cpu_decode_dtype = getattr(torch, cpu_rollout_dtype(self.config.dtype), None)

    def generate_sequences(self, prompts: DataProto) -> DataProto:
        """Generate for left-padded ``input_ids``/``attention_mask``/``position_ids`` ``(B, P)``; tensors only.

        meta_info: ``eos_token_id``, ``pad_token_id`` (required); ``do_sample``, ``validate`` and overrides of
        ``temperature``, ``response_length``, ``top_p``, ``top_k``.
        """
        batch_size = len(prompts)
        micro = self.config.micro_batch_size or batch_size
        with self.generation_context():
            outputs = [self._generate_minibatch(prompts[i : i + micro]) for i in range(0, batch_size, micro)]
        return DataProto.concat(outputs)

    @contextlib.contextmanager
    def generation_context(self):
        """Unshard a sharded module for the whole call, so generation steps need no collectives (ranks stop at
        different steps). Entering is a collective: every rank of the shard group must call generate_sequences.

        On CPU the weights decode in ``rollout.dtype`` (bf16 by default) where the CPU computes bf16 natively, as the
        vLLM rollout does: decoding reads every weight once per token, and half-size weights run about 1.5x faster.
        The trainer recomputes log-probs with the training weights, so only the samples see bf16 rounding. Decode
        steps attend with :func:`~verl.workers.engine.fsdp.cpu_attention.cpu_attention_forward` (sdpa's CPU kernel
        is slow for one query row)."""
        with self._context_lock:
            if self._context is None:  # nested or concurrent calls share the first one's context; the last closes it
                self._context = self._enter_generation_context()
            self._context_users += 1
        try:
            yield
        finally:
            with self._context_lock:
                self._context_users -= 1
                if self._context_users == 0:
                    self._context.close()
                    self._context = None

    @contextlib.contextmanager
    def weights_released(self):
        """Around a weight load on another thread while no decode step runs (partial rollout): a generation context
        that is open (an agent-loop batch waiting on tools, a parked decode loop) is closed for the load, so the load
        writes the float32 originals rather than the cast copies decoding uses, and reopened (cast anew) after it."""
        with self._context_lock:
            inside = self._context is not None
            if inside:
                self._context.close()
            try:
                yield
            finally:
                if inside:
                    self._context = self._enter_generation_context()

    def _enter_generation_context(self) -> contextlib.ExitStack:
        stack = contextlib.ExitStack()
        version = fsdp_version(self.module)
        if version == 1:
            from torch.distributed.fsdp import FullyShardedDataParallel as FSDP

            # recurse=True also covers nested wrapped layers (verl disables the wrap policy for the HF rollout).
            stack.enter_context(FSDP.summon_full_params(self.module, writeback=False, recurse=True))
        elif version == 2:
            stack.enter_context(fsdp2_full_params(self.module))
        if not is_accelerator_available():
            from verl.workers.engine.fsdp.cpu_attention import cpu_attention

            stack.enter_context(cpu_attention(self.module))
            if isinstance(self._cpu_decode_dtype, torch.dtype):
                stack.enter_context(weights_cast_to(self.module, self._cpu_decode_dtype))
        return stack

    def _generate_segments(self, input_ids, attention_mask, config: GenerationConfig, stop_ids, **model_kwargs):
        """``module.generate`` that a weight swap (``self.gate``) may pause after any decode step: the rows then
        continue from their prompt plus the tokens they have, under the new weights.

        ``input_ids`` / ``attention_mask`` ``(b, P)``; returns the generated ids ``(b*num_return, T)``, their
        log-probs ``(b*num_return, T)`` float32 (``calculate_log_probs``; else None) and the weight version of each
        (``(b*num_return, T)`` int64; None without a gate).
        """
        # synced_gpus=False: HF's default for an FSDP-managed module all-reduces "unfinished" every decode step, but
        # the generation context has unsharded the weights, and ranks make different numbers of calls (agent loops
        # with different turn counts): a rank past its last call would leave the others waiting forever. FSDP1's
        # forward still gathers inside summon_full_params, so it keeps HF's lockstep (None: HF decides).
        synced = None if fsdp_version(self.module) == 1 else False
        want_log_probs = self.config.calculate_log_probs
        config = self._without_vision_placeholders(config)
        n = config.num_return_sequences or 1
        config, warpers = self._sampling_on_cpu(config)
        if warpers is not None and n > 1:
            # the greedy loop samples one row per row: repeat the prompts as HF's own expansion does (i*n + j)
            input_ids, attention_mask = input_ids.repeat_interleave(n, 0), attention_mask.repeat_interleave(n, 0)
        if self.gate is None or model_kwargs:  # multimodal inputs are not re-fed on a resume: never paused
            sampler = self._sampler(warpers)
            out = self.module.generate(
                input_ids=input_ids,
                attention_mask=attention_mask,
                generation_config=config,
                synced_gpus=synced,
                **self._processor_kwargs(warpers, sampler),
                **model_kwargs,
            )
            new = out.sequences[:, input_ids.size(1) :]
            log_probs = self._sampled_log_probs(out, new, sampler) if want_log_probs else None
            return new, log_probs, None
        budget, min_new = config.max_new_tokens, config.min_new_tokens or 0
        stop = torch.tensor(sorted(stop_ids), device=input_ids.device)
        ids, mask, pieces, log_probs, versions = input_ids, attention_mask, [], [], []
        while True:
            sampler = self._sampler(warpers)
            with self.gate.running():
                version = self.gate.version
                out = self.module.generate(
                    input_ids=ids,
                    attention_mask=mask,
                    generation_config=config,
                    synced_gpus=synced,
                    stopping_criteria=StoppingCriteriaList([_PauseForWeights(self.gate)]),
                    **self._processor_kwargs(warpers, sampler),
                )
            new = out.sequences[:, ids.size(1) :]
            pieces.append(new)
            versions.append(torch.full(new.shape, version, dtype=torch.long, device=new.device))
            if want_log_probs:
                log_probs.append(self._sampled_log_probs(out, new, sampler))
            generated = torch.cat(pieces, dim=1)
            stopped = torch.isin(generated, stop).any(dim=1) if generated.size(1) >= min_new else None
            if generated.size(1) >= budget or (stopped is not None and bool(stopped.all())):
                break
            # the swap stopped this loop (nothing else ends it early): wait for the weights, go on from here
            self.gate.park()
            mask = mask.repeat_interleave(out.sequences.size(0) // mask.size(0), dim=0)
            ids, mask = out.sequences, torch.cat([mask, torch.ones_like(new)], dim=1)
            config = copy.deepcopy(config)
            config.num_return_sequences = 1
            config.max_new_tokens = budget - generated.size(1)
            if min_new:
                config.min_new_tokens = max(0, min_new - generated.size(1))
        return (
            torch.cat(pieces, dim=1),
            torch.cat(log_probs, dim=1) if want_log_probs else None,
            torch.cat(versions, dim=1),
        )

    def _without_vision_placeholders(self, config: GenerationConfig) -> GenerationConfig:
        """``config`` that never samples a vision-language model's image or video placeholder token. The model's
        forward pairs each placeholder in the sequence with an image feature, so a sampled one makes every later
        pass over the response fail ("Image features and image tokens do not match"); a trained model does not
        write them, a random test model can."""
        model_config = getattr(self.module, "config", None)
        placeholders = {getattr(model_config, key, None) for key in _VISION_PLACEHOLDERS} - {None}
        if not placeholders:
            return config
        config = copy.deepcopy(config)
        config.suppress_tokens = sorted(set(config.suppress_tokens or ()) | placeholders)
        return config

    def _sampling_on_cpu(self, config: GenerationConfig) -> tuple[GenerationConfig, list | None]:
        """On CPU, sampling runs as a greedy ``generate`` whose last logits processor draws the token
        (:mod:`~verl.workers.rollout.categorical_sampler`: HF's ``torch.multinomial`` costs as much as the rest of a
        decode step at a 49k vocabulary there). Returns the greedy config and HF's warpers for the sampling settings
        (temperature, top-k, top-p, applied as HF applies them), one sequence per row; ``(config, None)`` where HF
        samples itself: on accelerators, and where the model's generation config asks for a warper the sampler does
        not apply."""
        if not config.do_sample or is_accelerator_available() or self._model_sets_other_warpers():
            return config, None
        warpers = sampling_warpers(config.temperature, config.top_k or 0, config.top_p)
        greedy = copy.deepcopy(config)
        greedy.do_sample = False
        for key, value in _GREEDY_NEUTRAL.items():
            setattr(greedy, key, value)
        greedy.output_scores = False  # the sampler records the processed log-probs; HF's would be its one-hot rows
        greedy.num_return_sequences = 1  # greedy takes one row per row: the caller repeats the prompts n times
        return greedy, warpers

    def _model_sets_other_warpers(self) -> bool:
        """Whether the model's generation config sets a sampling warper other than temperature, top-k and top-p
        (``generate`` applies those defaults where the request leaves them unset)."""
        defaults = getattr(self.module, "generation_config", None)
        return any(getattr(defaults, key, None) not in (None, neutral) for key, neutral in _OTHER_WARPERS.items())

    def _sampler(self, warpers: list | None) -> CategoricalSampler | None:
        if warpers is None:
            return None
        return CategoricalSampler(
            record_log_probs=self.config.calculate_log_probs and self.config.logprobs_mode != "raw_logprobs"
        )

    @staticmethod
    def _processor_kwargs(warpers: list | None, sampler: CategoricalSampler | None) -> dict:
        return {} if sampler is None else {"logits_processor": LogitsProcessorList([*warpers, sampler])}

    def _sampled_log_probs(self, out, new: torch.Tensor, sampler: CategoricalSampler | None) -> torch.Tensor:
        """``(b, T)`` log-probs of the generated tokens: the sampler's record of the processed scores (what
        ``output_scores`` would hold), else from the per-step scores or raw logits ``generate`` kept."""
        if sampler is not None and sampler.record_log_probs:
            if new.size(1) == 0:
                return new.new_zeros(new.shape, dtype=torch.float32)
            return sampler.step_log_probs()
        return sampled_log_probs(self._step_logits(out), new, torch.ones_like(new))

    def _log_prob_kwargs(self) -> dict:
        """``generate`` options that keep the per-step logits for ``rollout_log_probs`` (``calculate_log_probs``):
        the processed ones (temperature, top-k, top-p applied) or, with ``logprobs_mode=raw_logprobs``, the raw."""
        if not self.config.calculate_log_probs:
            return {}
        if self.config.logprobs_mode == "raw_logprobs":
            return {"output_logits": True}
        return {"output_scores": True}

    def _step_logits(self, output) -> tuple[torch.Tensor, ...]:
        return output.logits if self.config.logprobs_mode == "raw_logprobs" else output.scores

    @staticmethod
    def _generation_kwargs(request: SamplingRequest) -> dict:
        if not request.do_sample:
            # temperature 0 means greedy in verl's configs; HF rejects it as a sampling temperature.
            return {"do_sample": False, "num_beams": 1, "num_return_sequences": 1, **_GREEDY_NEUTRAL}
        return {
            "do_sample": True,
            "num_beams": 1,
            "temperature": float(request.temperature),
            "top_p": float(request.top_p),
            "top_k": max(0, int(request.top_k)),  # verl's -1 ("off") is HF's 0
            "num_return_sequences": int(request.n),
        }

    @torch.no_grad()
    def generate_turns(
        self, prompts: list[list[int]], max_tokens: list[int], request: SamplingRequest, stop_token_ids: list[int]
    ) -> list:
        """One assistant turn per token-id prompt (the multi-turn loop's engine call): each row's ids through its
        first stop token, at most its own ``max_tokens``; with ``calculate_log_probs`` the sampled tokens' log-probs.

        Call it inside ``generation_context()``: a sharded module is unsharded once for all the turns of a batch,
        since ranks whose conversations take different numbers of turns cannot meet in a collective per turn.
        """
        from verl.multi_turn.turn_engine import GeneratedTurn

        gen_kwargs = {**self._generation_kwargs(request), "num_return_sequences": 1}
        micro = self.config.micro_batch_size or len(prompts)
        device = next(self.module.parameters()).device
        turns = []
        was_training = self.module.training
        self.module.eval()
        with autocast_context():
            for start in range(0, len(prompts), micro):
                rows, limits = prompts[start : start + micro], max_tokens[start : start + micro]
                width = max(len(r) for r in rows)
                # Left padding with a real stop id: the mask hides it, and any id is a valid embedding index.
                ids = torch.tensor([[stop_token_ids[0]] * (width - len(r)) + r for r in rows], device=device)
                mask = torch.tensor([[0] * (width - len(r)) + [1] * len(r) for r in rows], device=device)
                config = GenerationConfig(
                    max_new_tokens=max(limits),
                    eos_token_id=list(stop_token_ids),
                    pad_token_id=stop_token_ids[0],
                    use_cache=True,
                    return_dict_in_generate=True,
                    **self._log_prob_kwargs(),
                    **gen_kwargs,
                )
                generated, step_log_probs, versions = self._generate_segments(ids, mask, config, stop_token_ids)
                step_log_probs = step_log_probs.tolist() if step_log_probs is not None else None
                versions = versions.tolist() if versions is not None else None
                for i, (row, limit) in enumerate(zip(generated.tolist(), limits)):
                    row = row[:limit]
                    ends = [j for j, tok in enumerate(row) if tok in stop_token_ids]
                    kept = ends[0] + 1 if ends else len(row)
                    log_probs = step_log_probs[i][:kept] if step_log_probs is not None else None
                    turns.append(GeneratedTurn(row[:kept], log_probs, versions[i][:kept] if versions else None))
        if was_training:
            self.module.train()
        return turns

    @torch.no_grad()
    def _generate_minibatch(self, prompts: DataProto) -> DataProto:
        meta = prompts.meta_info
        for key in ("eos_token_id", "pad_token_id"):
            if key not in meta:
                raise KeyError(f"prompts.meta_info[{key!r}] is required by HFRollout (the worker sets it)")
        eos_token_id, pad_token_id = meta["eos_token_id"], meta["pad_token_id"]
        request = SamplingRequest.resolve(meta, self.config)
        response_length = request.response_length
        gen_kwargs = self._generation_kwargs(request)
        if self.config.ignore_eos:  # EOS is masked out until the last position: every row runs to response_length
            gen_kwargs["min_new_tokens"] = response_length
        num_return = gen_kwargs["num_return_sequences"]

        idx = prompts.batch["input_ids"]
        attention_mask = prompts.batch["attention_mask"]
        position_ids = prompts.batch["position_ids"]
        multi_modal_inputs = prompts.non_tensor_batch.get("multi_modal_inputs")
        if multi_modal_inputs is not None and num_return > 1:
            # HF's expansion for num_return_sequences repeats every kwarg row-wise, which is wrong for pixel_values
            # (patches of all images, not one row per prompt): repeat the prompts here and sample once each
            idx, attention_mask, position_ids = (
                t.repeat_interleave(num_return, dim=0) for t in (idx, attention_mask, position_ids)
            )
            multi_modal_inputs = np.repeat(multi_modal_inputs, num_return)
            gen_kwargs["num_return_sequences"] = num_return = 1
        device = next(self.module.parameters()).device
        # Padding-side handling is ours (left-padded prompts), so the model's generation defaults stay out of it.
        generation_config = GenerationConfig(
            max_new_tokens=response_length,
            eos_token_id=eos_token_id,
            pad_token_id=pad_token_id,
            use_cache=True,
            return_dict_in_generate=True,
            **self._log_prob_kwargs(),
            **gen_kwargs,
        )
        was_training = self.module.training
        self.module.eval()
        with autocast_context():
            # prompt columns that are padding in every row only cost attention time (HF derives positions from
            # the mask, so dropping them changes nothing else)
            used = attention_mask.any(dim=0).nonzero()
            start = int(used[0]) if used.numel() else 0
            input_ids = idx[:, start:].to(device)
            vision_kwargs = {}
            if multi_modal_inputs is not None:
                from verl.models.transformers.qwen2_vl import generation_inputs

                vision_kwargs = generation_inputs(self.module.config, input_ids, multi_modal_inputs)
            eos_ids = eos_token_id if isinstance(eos_token_id, list | tuple) else [eos_token_id]
            responses, step_log_probs, versions = self._generate_segments(
                input_ids, attention_mask[:, start:].to(device), generation_config, eos_ids, **vision_kwargs
            )
        responses = responses.to(idx.device)
        prompt_length = idx.size(1)
        if responses.size(1) < response_length:  # every row stopped early
            missing = response_length - responses.size(1)
            pad = responses.new_full((responses.size(0), missing), pad_token_id)
            responses = torch.cat([responses, pad], dim=1)
            if step_log_probs is not None:
                step_log_probs = torch.cat([step_log_probs, step_log_probs.new_full((len(pad), missing), -1.0)], 1)
            if versions is not None:
                versions = torch.cat([versions, versions.new_full((len(pad), missing), -1)], 1)
        if num_return > 1:
            attention_mask = attention_mask.repeat_interleave(num_return, dim=0)
            position_ids = position_ids.repeat_interleave(num_return, dim=0)
        prompts_out = idx.repeat_interleave(num_return, dim=0) if num_return > 1 else idx
        batch = build_rollout_output(prompts_out, attention_mask, position_ids, responses, eos_token_id)
        response_mask = batch["attention_mask"][:, prompt_length:].bool()
        if step_log_probs is not None:
            batch["rollout_log_probs"] = torch.where(response_mask, step_log_probs.cpu(), -1.0).to(responses.device)
        if versions is not None:  # partial rollout: the version that sampled each token, -1 past the response
            batch["weight_versions"] = torch.where(response_mask, versions.cpu(), -1).to(responses.device)
        if is_accelerator_available():
            get_torch_device().empty_cache()
        if was_training:
            self.module.train()
        return DataProto(batch=batch)


class _PauseForWeights(StoppingCriteria):
    """Stops every row of a ``generate`` call after the current step when a weight swap waits."""

    def __init__(self, gate):
        self.gate = gate

    def __call__(self, input_ids: torch.LongTensor, scores, **kwargs) -> torch.BoolTensor:
        return torch.full((input_ids.size(0),), self.gate.step(), dtype=torch.bool, device=input_ids.device)
