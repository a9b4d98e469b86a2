"""The FSDP/FSDP2 engine: an HF transformers model sharded with FSDP1 or FSDP2 (``strategy`` fsdp / fsdp2).

Its forwards pack the valid tokens of a micro batch into one row (``use_remove_padding``) or run the padded batch
with the all-padding columns trimmed; under Ulysses sequence parallelism (sp > 1, packed only) each rank of an SP
group runs a slice of every packed row of the group's gathered batch. A policy's log-probs come from the logits
divided by the temperature, or from the fused output head (``use_fused_kernels``, no logits built); the entropy a
loss differentiates may be compiled (``use_torch_compile``), chunked or checkpointed. On CPU an update attends with
the plain attention form (:mod:`verl.workers.engine.fsdp.cpu_attention`).
"""

from __future__ import annotations

import contextlib
import functools
import logging
from collections.abc import Iterator

import torch
import torch.distributed as dist
import torch.nn as nn

import verl.utils.torch_functional as verl_F
from verl.protocol import DataProto
from verl.utils.dataset.vision_utils import merge_multi_modal_inputs
from verl.utils.device import release_freed_host_memory
from verl.utils.fsdp_utils import FSDP2Accumulation, fsdp2_full_params, fsdp_version
from verl.workers.engine.base import LossFn, TrainingEngine
from verl.workers.engine.fsdp.activation_checkpointing import ActivationCheckpointing
from verl.workers.engine.fsdp.cpu_attention import training_attention
from verl.workers.engine.fsdp.fused_head import check_fusable_head, fused_output_head
from verl.workers.engine.fsdp.hf_forward import (
    autocast_context,
    compute_device,
    gather_sequence_parallel,
    optimizer_step,
    pack_padded_inputs,
    packed_forward_kwargs,
    packed_response_positions,
    padded_forward,
    score_sequences,
    slice_for_sequence_parallel,
    takes_logits_to_keep,
    trim_padding_columns,
    unpack_to_padded,
)
from verl.workers.engine.fsdp.offload import OffloadGuard
from verl.workers.engine.micro_batches import make_micro_batches, restore_order, to_device
from verl.workers.engine.pretrained import PretrainedFiles
from verl.workers.engine.registry import register_engine
from verl.workers.engine.width_groups import forward_by_groups, width_groups
from verl.workers.sharding_manager.fsdp_ulysses import FSDPUlyssesShardingManager

logger = logging.getLogger(__name__)

__all__ = ["FSDPEngine"]

_FORWARD_KEYS = ["responses", "input_ids", "attention_mask", "position_ids"]


def _pad_responses(values: torch.Tensor, response_length: int) -> torch.Tensor:
    """Right-pad ``(b, kept)`` per-token values with zeros to ``(b, response_length)`` (the trimmed columns)."""
    missing = response_length - values.shape[-1]
    return values if missing == 0 else torch.nn.functional.pad(values, (0, missing))


def _entropy_formula(logits: torch.Tensor) -> torch.Tensor:
    """``verl_F.entropy_from_logits`` as one formula, for ``torch.compile`` (``use_torch_compile``): compiled, one fused
    reduction over the vocabulary, forward and backward; eager, it would allocate two full-size float32 copies."""
    x = logits.float()
    return (torch.logsumexp(x, dim=-1) - (torch.softmax(x, dim=-1) * x).sum(-1)).to(logits.dtype)


@functools.cache
def _compiled_entropy_formula():
    return torch.compile(_entropy_formula, dynamic=True)


def _compiled_entropy(logits: torch.Tensor) -> torch.Tensor:
    """:func:`_entropy_formula` compiled on first use: wrapping it in ``torch.compile`` imports the compiler (about a
    second of a worker's start-up on CPU), and only a loss with ``entropy_coeff != 0`` calls it."""
    return _compiled_entropy_formula()(logits)


def _release_host_memory(device: torch.device) -> None:
    """On CPU, hand the memory this micro batch freed back to the OS before the next allocations when the host is
    short of memory (see :func:`verl.utils.device.release_freed_host_memory`). glibc otherwise keeps the forward's
    freed activations in its heaps beside the backward's, and one micro batch's beside the next one's: on
    SmolLM2-135M's shape (micro batch 4 x 282 tokens) trimming always took the update's peak down by 0.5 GB per
    process (at the same speed on that host); where memory is plentiful they are kept for reuse, which saves the
    page faults."""
    if device.type == "cpu":
        release_freed_host_memory()


def _sharded_across_ranks(module: nn.Module) -> bool:
    """Whether ``module`` is FSDP2-sharded over more than one rank."""
    return dist.is_initialized() and dist.get_world_size() > 1 and fsdp_version(module) == 2


def _shallow_copy(data: DataProto) -> DataProto:
    return DataProto(batch=data.batch, non_tensor_batch=data.non_tensor_batch, meta_info=data.meta_info)


@register_engine("fsdp", "fsdp2")
class FSDPEngine(TrainingEngine):
    """A policy, value or reward model under FSDP1/FSDP2 (or a plain module), with its optimizer when trained.

    Built by :meth:`build` from a role's config, or directly around an existing ``module`` (the data-parallel actor
    and critic do that): then ``sequence_parallel`` is None and, under sp > 1, the caller installs the SP group.
    ``remove_padding_key`` names the setting that enables packing, for the error when sp > 1 lacks it.
    """

    def __init__(
        self,
        module: nn.Module,
        optimizer: torch.optim.Optimizer | None = None,
        lr_scheduler=None,
        *,
        kind: str = "policy",
        grad_clip: float | None = None,
        use_remove_padding: bool = False,
        use_fused_kernels: bool = False,
        ulysses_sp_size: int = 1,
        entropy_from_logits_with_chunking: bool = False,
        entropy_from_logits_chunk_size: int = 2048,
        use_torch_compile: bool = False,
        entropy_checkpointing: bool = False,
        sequence_parallel: FSDPUlyssesShardingManager | None = None,
        offload: OffloadGuard | None = None,
        checkpoint_config=None,
        processing_class=None,
        remove_padding_key: str = "use_remove_padding",
        gradient_checkpointing: ActivationCheckpointing | None = None,
    ):
        if kind not in ("policy", "value", "score"):
            raise ValueError(f"kind={kind!r}: expected 'policy', 'value' or 'score'")
        if ulysses_sp_size > 1 and not use_remove_padding:
            raise ValueError(
                f"ulysses_sequence_parallel_size={ulysses_sp_size} needs packed inputs: set {remove_padding_key}=True"
            )
        self.kind = kind
        self._module = module
        self.optimizer = optimizer
        self.lr_scheduler = lr_scheduler
        self.grad_clip = grad_clip
        self.use_remove_padding = use_remove_padding
        self.use_fused_kernels = use_fused_kernels
        self.ulysses_sp_size = ulysses_sp_size
        self.entropy_checkpointing = entropy_checkpointing
        self.sequence_parallel = sequence_parallel
        self.offload = offload or OffloadGuard(offload_param=False, offload_optimizer=False)
        self.checkpoint_config = checkpoint_config
        self.processing_class = processing_class
        self.gradient_checkpointing = gradient_checkpointing
        self._checkpoint_manager = None
        if kind == "policy" and use_fused_kernels:
            check_fusable_head(module)
        if entropy_from_logits_with_chunking:
            # as in verl, chunking (for memory) takes precedence over compiling (for speed)
            self._entropy_fn = functools.partial(
                verl_F.entropy_from_logits_with_chunking, chunk_size=entropy_from_logits_chunk_size
            )
        elif use_torch_compile and kind == "policy":
            # one fused reduction kernel, forward and backward; dynamic shapes: micro-batches vary in length
            self._entropy_fn = _compiled_entropy
        else:
            self._entropy_fn = verl_F.entropy_from_logits
        self.device = compute_device()
        # Ranks on one CPU host talk over gloo and loopback TCP, where FSDP2's per-micro-batch all-gathers and
        # reduce-scatters are a large share of an update (FSDP2Accumulation): there, gather once per mini batch
        # (and once per log-prob pass) instead. Accelerators keep FSDP's per-layer memory bound.
        self._few_collectives = self.device.type == "cpu" and _sharded_across_ranks(module)
        self._accumulation = FSDP2Accumulation(module) if self._few_collectives and optimizer is not None else None
        self._micro_batches_left = 0
        # Padded forwards on CPU (no-grad passes and the update's) run a micro batch's rows in groups of like length,
        # each at its own width (width_groups): one process, or FSDP2 ranks holding full parameters (a training
        # forward then agrees on the group count, _row_groups). Not packed (no padding to save); accelerators keep
        # one forward per micro batch (not measured there).
        self._group_by_width = (
            self.device.type == "cpu"
            and not use_remove_padding
            and (self._few_collectives or not (dist.is_initialized() and dist.get_world_size() > 1))
        )
        if self._few_collectives:
            logger.info(
                "FSDP2 on CPU over %d ranks: parameters are gathered once per mini batch and per log-prob pass, "
                "gradients reduced once per mini batch (not per micro batch)",
                dist.get_world_size(),
            )

    # ------------------------------------------------------------------------------------------------ building
    @classmethod
    def build(cls, role: str, config, files: PretrainedFiles) -> FSDPEngine:
        from transformers import AutoModelForTokenClassification

        from verl.workers.engine.fsdp.setup import (
            build_fsdp_model,
            build_optimizer,
            create_device_mesh,
            ulysses_sharding_manager,
        )
        from verl.workers.engine.pretrained import policy_auto_class

        world_size = dist.get_world_size()
        model_cfg = config.model
        if role in ("actor", "rollout", "ref"):
            # a standalone rollout samples from a copy built like the actor's (its strategy and fsdp_config, resident
            # on the device) but without an optimizer; only the reference is the frozen, offloaded copy
            section = config.ref if role == "ref" else config.actor
            trainable = role == "actor"
            kind, auto_cls, lora_task = "policy", policy_auto_class(files.hf_config), "CAUSAL_LM"
            fsdp_config, strategy = section.fsdp_config, section.strategy
            # actor and reference share one device mesh and one ("dp", "sp") mesh (the config check refuses a ref
            # sp that differs)
            mesh_fsdp_size = config.actor.fsdp_config.fsdp_size
            sp_size = config.actor.ulysses_sequence_parallel_size
            lora = model_cfg if trainable and model_cfg.is_lora else None
            liger_key = "actor_rollout_ref.model.use_liger" if model_cfg.use_liger else None
            cpu_offload = True if role == "ref" else None
            train_section, processing_class = config.actor, files.processor or files.tokenizer
            forward = {
                "use_remove_padding": section.use_remove_padding,
                "use_fused_kernels": section.use_fused_kernels,
                "ulysses_sp_size": section.ulysses_sequence_parallel_size,
                "entropy_from_logits_with_chunking": section.entropy_from_logits_with_chunking,
                "entropy_from_logits_chunk_size": section.entropy_from_logits_chunk_size,
                "use_torch_compile": section.use_torch_compile,
                "entropy_checkpointing": section.entropy_checkpointing,
                "remove_padding_key": "actor_rollout_ref.model.use_remove_padding",
            }
        elif role == "critic":
            trainable, kind, auto_cls, lora_task = True, "value", AutoModelForTokenClassification, "TOKEN_CLS"
            # verl 0.9's block (the section unified it with v0.4's critic.model.fsdp_config when it was built)
            fsdp_config, strategy = config.fsdp, config.strategy
            mesh_fsdp_size, sp_size = fsdp_config.fsdp_size, config.ulysses_sequence_parallel_size
            lora, liger_key = (model_cfg if model_cfg.is_lora else None), None
            cpu_offload, train_section, processing_class = None, config, files.tokenizer
            forward = {
                "use_remove_padding": model_cfg.use_remove_padding,
                "ulysses_sp_size": sp_size,
                "remove_padding_key": "critic.model.use_remove_padding",
            }
        elif role == "reward_model":
            trainable, kind, auto_cls, lora_task = False, "score", AutoModelForTokenClassification, "TOKEN_CLS"
            fsdp_config, strategy = model_cfg.fsdp_config, config.strategy
            mesh_fsdp_size, sp_size, lora, cpu_offload, liger_key = fsdp_config.fsdp_size, 1, None, True, None
            train_section, processing_class = None, files.tokenizer
            forward = {
                "use_remove_padding": model_cfg.use_remove_padding,
                "remove_padding_key": "reward_model.model.use_remove_padding",
            }
        else:
            raise ValueError(f"role={role!r}: expected actor, rollout, ref, critic or reward_model")
        device_mesh = create_device_mesh(world_size, mesh_fsdp_size)
        sequence_parallel = ulysses_sharding_manager(world_size, sp_size) if kind != "score" else None
        checkpointing = None
        if trainable and model_cfg.enable_gradient_checkpointing:  # actor and critic models have both keys
            checkpointing = ActivationCheckpointing(model_cfg.gradient_checkpointing_policy, compute_device().type)
        module = build_fsdp_model(
            auto_cls,
            files,
            strategy=strategy,
            fsdp_config=fsdp_config,
            device_mesh=device_mesh,
            trainable=trainable,
            trust_remote_code=model_cfg.trust_remote_code,
            gradient_checkpointing=checkpointing,
            lora_config=lora,
            lora_task_type=lora_task,
            cpu_offload=cpu_offload,
            ulysses_sp_size=sp_size,
            liger_key=liger_key,
        )
        optimizer = lr_scheduler = offload = None
        if trainable:
            optimizer, lr_scheduler = build_optimizer(module, train_section.optim)
            offload = OffloadGuard(fsdp_config.param_offload, fsdp_config.optimizer_offload)
        engine = cls(
            module,
            optimizer,
            lr_scheduler,
            kind=kind,
            grad_clip=train_section.grad_clip if trainable else None,
            sequence_parallel=sequence_parallel,
            offload=offload,
            checkpoint_config=train_section.checkpoint if train_section is not None else None,
            processing_class=processing_class,
            gradient_checkpointing=checkpointing,
            **forward,
        )
        engine.offload.attach(module, optimizer)  # offloaded between calls from now on, as configured
        return engine

    @property
    def trainable(self) -> bool:
        return self.optimizer is not None

    @property
    def module(self) -> nn.Module:
        return self._module

    # ------------------------------------------------------------------------------------------------ forwards
    def policy_forward(
        self, micro_batch: dict, temperature: float, calculate_entropy: bool = False, entropy_grad: bool = True
    ) -> tuple[torch.Tensor | None, torch.Tensor]:
        """Per-token entropy (or None) and log-probs of ``responses``, both ``(b, response_length)``.

        micro_batch: ``input_ids``, ``attention_mask``, ``position_ids`` ``(b, seqlen)`` (mrope ``(b, 3, seqlen)``),
        ``responses`` ``(b, response_length)``, optional ``multi_modal_inputs``. Logits are divided by
        ``temperature`` before the softmax, as when sampling. ``entropy_grad``: whether a loss differentiates the
        entropy (else it is computed the cheaper way, or detached).
        """
        module = self._module
        responses = micro_batch["responses"]
        response_length = responses.size(-1)
        input_ids = micro_batch["input_ids"]
        attention_mask = micro_batch["attention_mask"]
        position_ids = micro_batch["position_ids"]
        mm_kwargs = merge_multi_modal_inputs(micro_batch)
        entropy = None
        with autocast_context():
            if self.use_remove_padding:
                ids_rmpad, pos_rmpad, valid = pack_padded_inputs(input_ids, attention_mask, position_ids)
                # The logit at packed position k predicts token k+1; at a sequence's last token that label is the
                # next sequence's first token, which lands on a padded response slot and is masked later.
                labels = torch.roll(ids_rmpad, shifts=-1, dims=1)
                sp = self.ulysses_sp_size
                ids_rmpad, pos_rmpad, labels, sp_pad = slice_for_sequence_parallel(
                    sp, ids_rmpad, pos_rmpad, labels, multi_modal=bool(mm_kwargs)
                )
                dtype = next(module.parameters()).dtype
                kwargs = packed_forward_kwargs(module, pos_rmpad, dtype, sequence_parallel=sp > 1)
                slots = None
                if sp == 1 and takes_logits_to_keep(module):
                    # only the positions that predict a response token go through the lm-head (fused or not) and
                    # the softmax (the padded path's logits_to_keep): the prompts' other positions are never read
                    read, slots = packed_response_positions(valid, response_length)
                    kwargs["logits_to_keep"] = read
                    labels = labels[:, read]
                if self.use_fused_kernels:
                    with fused_output_head(module, labels, temperature, calculate_entropy) as fused:
                        module(input_ids=ids_rmpad, **kwargs, **mm_kwargs)
                    log_probs, token_entropy = fused.log_probs.squeeze(0), fused.entropy
                    if token_entropy is not None:
                        token_entropy = token_entropy.squeeze(0) if entropy_grad else token_entropy.squeeze(0).detach()
                else:
                    logits = module(input_ids=ids_rmpad, **kwargs, **mm_kwargs).logits.squeeze(0)
                    logits.div_(temperature)
                    log_probs, token_entropy = self._log_probs_and_entropy(
                        logits, labels.squeeze(0), calculate_entropy, entropy_grad
                    )
                if slots is not None:  # (bs, response_length)
                    log_probs = unpack_to_padded(log_probs, slots)
                    entropy = unpack_to_padded(token_entropy, slots) if calculate_entropy else None
                else:
                    log_probs = unpack_to_padded(gather_sequence_parallel(log_probs, sp, sp_pad), valid)
                    log_probs = log_probs[:, -response_length - 1 : -1]
                    if calculate_entropy:
                        entropy = gather_sequence_parallel(token_entropy, sp, sp_pad)
                        entropy = unpack_to_padded(entropy, valid)[:, -response_length - 1 : -1]
            elif self.use_fused_kernels:
                entropy, log_probs = self._fused_padded_forward(
                    micro_batch, mm_kwargs, temperature, calculate_entropy, entropy_grad
                )
            else:
                output, kept = padded_forward(
                    module,
                    input_ids,
                    attention_mask,
                    position_ids,
                    response_length,
                    response_logits_only=True,
                    **mm_kwargs,
                )
                logits = output.logits
                logits.div_(temperature)
                logits = logits[:, -kept - 1 : -1, :]  # the positions that predict each (kept) response token
                log_probs, entropy = self._log_probs_and_entropy(
                    logits, responses[:, :kept], calculate_entropy, entropy_grad
                )
                log_probs = _pad_responses(log_probs, response_length)
                if calculate_entropy:
                    entropy = _pad_responses(entropy, response_length)
        return entropy, log_probs

    def _entropy(self, logits: torch.Tensor) -> torch.Tensor:
        """The entropy a loss differentiates (``entropy_coeff != 0``)."""
        if self.entropy_checkpointing:
            return torch.utils.checkpoint.checkpoint(self._entropy_fn, logits, use_reentrant=False)
        return self._entropy_fn(logits)

    def _log_probs_and_entropy(
        self, logits: torch.Tensor, labels: torch.Tensor, calculate_entropy: bool, entropy_grad: bool
    ) -> tuple[torch.Tensor, torch.Tensor | None]:
        """Log-probs of ``labels`` and, when asked, the entropy. An entropy no loss differentiates (a metric, or any
        no-grad pass) comes from the log-probs' own pass over the vocabulary (``logprobs_and_entropy_from_logits``);
        on SmolLM2-135M's shape that took 0.25 s against 0.14 s plus a compiled entropy's 0.33-1.3 s."""
        if not calculate_entropy:
            return verl_F.logprobs_from_logits(logits, labels), None
        if not (entropy_grad and torch.is_grad_enabled()):
            return verl_F.logprobs_and_entropy_from_logits(logits, labels)
        return verl_F.logprobs_from_logits(logits, labels), self._entropy(logits)

    def _fused_padded_forward(
        self, micro_batch: dict, mm_kwargs: dict, temperature: float, calculate_entropy: bool, entropy_grad: bool
    ) -> tuple[torch.Tensor | None, torch.Tensor]:
        """:meth:`policy_forward` on padded inputs with the fused log-prob head (``use_fused_kernels``): the head
        computes the kept response tokens' log-probs (and entropy) from the hidden states, no logits built."""
        responses = micro_batch["responses"]
        response_length = responses.size(-1)
        input_ids, attention_mask, position_ids, kept = trim_padding_columns(
            micro_batch["input_ids"], micro_batch["attention_mask"], micro_batch["position_ids"], response_length
        )
        labels = responses[:, :kept]
        with fused_output_head(self._module, labels, temperature, calculate_entropy, kept) as fused:
            padded_forward(
                self._module, input_ids, attention_mask, position_ids, kept, response_logits_only=True, **mm_kwargs
            )
        entropy = None
        if calculate_entropy:
            entropy = _pad_responses(fused.entropy if entropy_grad else fused.entropy.detach(), response_length)
        return entropy, _pad_responses(fused.log_probs, response_length)

    def value_forward(self, micro_batch: dict) -> torch.Tensor:
        """Values ``(b, response_length)``: the prediction at the state before each response token."""
        module = self._module
        response_length = micro_batch["responses"].size(-1)
        input_ids = micro_batch["input_ids"]
        attention_mask = micro_batch["attention_mask"]
        position_ids = micro_batch["position_ids"]
        mm_kwargs = merge_multi_modal_inputs(micro_batch)
        with autocast_context():
            if self.use_remove_padding:
                ids_rmpad, pos_rmpad, valid = pack_padded_inputs(input_ids, attention_mask, position_ids)
                sp = self.ulysses_sp_size
                ids_rmpad, pos_rmpad, _, sp_pad = slice_for_sequence_parallel(
                    sp, ids_rmpad, pos_rmpad, multi_modal=bool(mm_kwargs)
                )
                dtype = next(module.parameters()).dtype
                kwargs = packed_forward_kwargs(module, pos_rmpad, dtype, sequence_parallel=sp > 1)
                output = module(input_ids=ids_rmpad, **kwargs, **mm_kwargs)
                values_rmpad = self._values_from_output(output).reshape(-1)  # (nnz / sp,)
                values = unpack_to_padded(gather_sequence_parallel(values_rmpad, sp, sp_pad), valid)
                return values[:, -response_length - 1 : -1]
            output, kept = padded_forward(module, input_ids, attention_mask, position_ids, response_length, **mm_kwargs)
            values = self._values_from_output(output)
            if values.dim() == 3:
                values = values.squeeze(-1)
            values = values[:, -kept - 1 : -1]
            return torch.nn.functional.pad(values, (0, response_length - kept))

    def _values_from_output(self, output) -> torch.Tensor:
        if hasattr(self._module, "v_head"):
            return output[2]  # TRL AutoModelForCausalLMWithValueHead returns (logits, loss, value)
        return output.logits

    def _row_groups(self, micro_batch: dict, same_count_on_every_rank: bool = False) -> list[torch.Tensor] | None:
        """The rows of ``micro_batch`` in groups of like length (:func:`width_groups`), or None: one forward.

        ``same_count_on_every_rank``: as many groups on every rank (the fewest any rank wants). A training forward
        needs it over several FSDP2 ranks: the last micro batch's backward reduce-scatters once per forward.
        """
        if not self._group_by_width or "multi_modal_inputs" in micro_batch:
            return None
        mask, response_length = micro_batch["attention_mask"], micro_batch["responses"].size(-1)
        groups = width_groups(mask, response_length)
        if not (same_count_on_every_rank and self._few_collectives):
            return groups
        count = torch.tensor([len(groups) if groups else 1])
        dist.all_reduce(count, op=dist.ReduceOp.MIN)
        count = int(count)
        if groups is not None and len(groups) != count:
            groups = width_groups(mask, response_length, count=count)
        return groups

    def _by_width(self, micro_batch: dict, forward, same_count_on_every_rank: bool = False) -> dict:
        """``forward(micro_batch)``, run per group of like-length rows where :meth:`_row_groups` forms groups."""
        groups = self._row_groups(micro_batch, same_count_on_every_rank)
        return forward(micro_batch) if groups is None else forward_by_groups(micro_batch, groups, forward)

    def _forward(self, micro_batch: dict, **forward_kwargs) -> dict[str, torch.Tensor]:
        forward = functools.partial(self._forward_rows, **forward_kwargs)
        return self._by_width(micro_batch, forward, same_count_on_every_rank=True)

    def _forward_rows(self, micro_batch: dict, **forward_kwargs) -> dict[str, torch.Tensor]:
        if self.kind == "policy":
            entropy, log_probs = self.policy_forward(micro_batch, **forward_kwargs)
            return {"log_probs": log_probs, "entropy": entropy}
        if self.kind == "value":
            return {"values": self.value_forward(micro_batch)}
        raise NotImplementedError(f"a {self.kind!r} model is not trained")

    # ------------------------------------------------------------------------------------------ the interface
    @contextlib.contextmanager
    def _sequence_parallel(self) -> Iterator[FSDPUlyssesShardingManager | None]:
        if self.sequence_parallel is None:
            yield None
        else:
            with self.sequence_parallel as sp:
                yield sp

    def infer(self, data: DataProto) -> dict[str, torch.Tensor]:
        meta = data.meta_info
        use_dynamic_bsz = meta.get("use_dynamic_bsz", False)
        max_token_len = meta.get("max_token_len")
        if self.kind == "score":
            micro_batch_size = meta.get("micro_batch_size") or len(data)
            budget = max_token_len if use_dynamic_bsz else None
            scores = score_sequences(self._module, data.batch, micro_batch_size, budget, self.use_remove_padding)
            return {"scores": scores}
        with self._sequence_parallel() as sp:
            if sp is not None:
                data = sp.preprocess_data(_shallow_copy(data))  # the gather rebinds its batch: not the caller's
            outputs = self._infer(data, use_dynamic_bsz, max_token_len)
            if sp is not None:
                outputs = dict(sp.postprocess_data(DataProto.from_dict(outputs)).batch.items())
        return outputs

    def _infer(self, data: DataProto, use_dynamic_bsz: bool, max_token_len: int | None) -> dict[str, torch.Tensor]:
        self._module.eval()
        meta = data.meta_info
        if use_dynamic_bsz and max_token_len is not None:
            max_token_len = max_token_len * self.ulysses_sp_size
        micro_batches, partitions = make_micro_batches(
            data, _FORWARD_KEYS, meta.get("micro_batch_size"), use_dynamic_bsz, max_token_len
        )
        calculate_entropy = self.kind == "policy" and meta.get("calculate_entropy", False)
        results: dict[str, list[torch.Tensor]] = {}
        # every rank decides alike (entering is a collective), whatever its number of micro batches
        with fsdp2_full_params(self._module) if self._few_collectives else contextlib.nullcontext():
            self._infer_micro_batches(micro_batches, meta, calculate_entropy, results)
        return {key: restore_order(torch.cat(values, dim=0), partitions) for key, values in results.items()}

    def _infer_micro_batches(self, micro_batches, meta: dict, calculate_entropy: bool, results: dict) -> None:
        def forward(micro_batch: dict) -> dict[str, torch.Tensor | None]:
            if self.kind == "policy":
                entropy, log_probs = self.policy_forward(
                    micro_batch, temperature=meta["temperature"], calculate_entropy=calculate_entropy
                )
                return {"log_probs": log_probs, "entropys": entropy}
            return {"values": self.value_forward(micro_batch)}

        for micro_batch in micro_batches:
            micro_batch = to_device(micro_batch, self.device)
            with torch.no_grad():
                outputs = self._by_width(micro_batch, forward)
            for key, value in outputs.items():
                if value is not None:
                    results.setdefault(key, []).append(value)
            if self.kind == "policy":
                _release_host_memory(self.device)

    @contextlib.contextmanager
    def training(self, data: DataProto) -> Iterator[DataProto]:
        with self._sequence_parallel() as sp, self._training_attention():
            if sp is not None:
                data = sp.preprocess_data(_shallow_copy(data))
            self._module.train()
            yield data

    def _training_attention(self):
        """See :func:`verl.workers.engine.fsdp.cpu_attention.training_attention`."""
        return training_attention(self._module, self.device, self.ulysses_sp_size)

    def micro_batches(
        self, data: DataProto, micro_batch_size: int | None, use_dynamic_bsz: bool, max_token_len: int | None
    ) -> list[dict]:
        if use_dynamic_bsz and max_token_len is not None:
            max_token_len = max_token_len * self.ulysses_sp_size  # the SP group shares each packed row
        micro_batches, _ = make_micro_batches(
            data, list(data.batch.keys()), micro_batch_size, use_dynamic_bsz, max_token_len
        )
        if self._accumulation is not None:  # the mini batch's forward_backward calls follow, one per micro batch
            self._accumulation.finish()
            self._micro_batches_left = len(micro_batches)
        return micro_batches

    def forward_backward(self, micro_batch: dict, loss_fn: LossFn, **forward_kwargs) -> dict[str, float]:
        if self._micro_batches_left > 0:
            self._micro_batches_left -= 1
            self._accumulation.micro_batch(last=self._micro_batches_left == 0)
        micro_batch = to_device(micro_batch, self.device)
        if self.gradient_checkpointing is not None:
            self.gradient_checkpointing.plan(self._tokens_per_rank(micro_batch))
        loss, metrics = loss_fn(self._forward(micro_batch, **forward_kwargs), micro_batch)
        _release_host_memory(self.device)  # the forward's freed temporaries, before the backward's
        loss.backward()
        if self._accumulation is not None and self._micro_batches_left == 0:
            self._accumulation.finish()
        _release_host_memory(self.device)
        return metrics

    def _tokens_per_rank(self, micro_batch: dict) -> int:
        """The tokens a training forward of ``micro_batch`` computes on this rank: the valid ones when packed (split
        over the sequence-parallel group), every position of the trimmed width when padded."""
        mask = micro_batch["attention_mask"]
        if self.use_remove_padding:
            return -(-int(mask.sum()) // self.ulysses_sp_size)
        response_length = micro_batch["responses"].size(-1)
        _, trimmed, _, _ = trim_padding_columns(
            micro_batch["input_ids"], mask, micro_batch["position_ids"], response_length
        )
        return trimmed.numel()

    def zero_grad(self) -> None:
        self.optimizer.zero_grad()

    def optimizer_step(self) -> torch.Tensor:
        return optimizer_step(self._module, self.optimizer, self.grad_clip)

    def lr(self) -> float:
        return self.lr_scheduler.get_last_lr()[0]

    def lr_scheduler_step(self) -> None:
        self.lr_scheduler.step()

    def resident(self, with_optimizer: bool = False):
        return self.offload.resident(with_optimizer=with_optimizer)

    def hf_weights(self) -> Iterator[tuple[str, torch.Tensor]]:
        from verl.workers.sharding_manager.fsdp_weights import fsdp_full_weights, tied_lm_head

        return fsdp_full_weights(self._module, skip_tied_lm_head=tied_lm_head(self._module))

    def rollout_weight_handoff(self, rollout, hf_config, rollout_config, device_mesh):
        from verl.workers.sharding_manager.fsdp_vllm import FSDPVLLMShardingManager

        load_format = rollout_config.load_format
        return FSDPVLLMShardingManager(
            module=self._module,
            inference_engine=rollout.inference_engine,
            model_config=hf_config,
            full_params="hf" in load_format,
            device_mesh=device_mesh,
            offload_param=self.offload.offload_param,
            load_format=load_format,
            layered_summon=rollout_config.layered_summon,
            free_cache_engine=rollout_config.free_cache_engine,
        )

    def _checkpointer(self):
        """The checkpoint manager, built on first use."""
        if self._checkpoint_manager is None:
            from verl.utils.checkpoint.fsdp_checkpoint_manager import FSDPCheckpointManager

            self._checkpoint_manager = FSDPCheckpointManager(
                model=self._module,
                optimizer=self.optimizer,
                lr_scheduler=self.lr_scheduler,
                processing_class=self.processing_class,
                checkpoint_config=self.checkpoint_config,
            )
        return self._checkpoint_manager

    def save_checkpoint(self, local_path: str, hdfs_path=None, global_step: int = 0, max_ckpt_to_keep=None) -> None:
        with self.resident():
            self._checkpointer().save_checkpoint(
                local_path=local_path, hdfs_path=hdfs_path, global_step=global_step, max_ckpt_to_keep=max_ckpt_to_keep
            )
        dist.barrier()

    def load_checkpoint(self, local_path: str, hdfs_path=None, del_local_after_load: bool = False) -> None:
        with self.resident():
            self._checkpointer().load_checkpoint(
                local_path=local_path, hdfs_path=hdfs_path, del_local_after_load=del_local_after_load
            )
        self.offload.offload_optimizer_state()
