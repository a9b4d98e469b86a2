"""The Megatron engine (``strategy=megatron``): a policy, value model (critic) or reward model as a tensor- and
pipeline-parallel megatron-core ``GPTModel``; the value and reward models end, on the last pipeline stage, in a scalar
head (:class:`~verl.workers.engine.megatron.model.ScalarHead`, HF's ``score``) instead of the LM head.

Data: the role workers dispatch per rank (DP_COMPUTE_PROTO, one chunk per worker). The ranks that hold one copy of the
model (its tensor x pipeline group, "model-parallel group") must work on the same rows, so the engine all-gathers the
chunks of that group first and hands each rank its own rows' results back afterwards, as the FSDP engine does for a
Ulysses group. Every tensor-parallel rank ends with the full (gathered) logits; only the last pipeline stage has
them, and it broadcasts the results to the other stages.

Sequence parallelism (``sequence_parallel``, verl's default, at TP > 1) is megatron-core's own too: each micro batch
is padded on the right to a multiple of the tensor-parallel size, the stages exchange this rank's share of the
positions, and the padding is cut from the outputs (:mod:`verl.workers.engine.megatron.model`).

Gradients: tensor parallelism is megatron-core's own (its layers reduce across the group in forward and backward);
across data-parallel replicas the engine averages the gradients with one all-reduce per update, and with tied
embeddings over pipeline stages it sums the two copies' gradients (first and last stage). Clipping uses the global
norm over all shards, each tensor-parallel duplicate counted once. The optimizer is torch's AdamW on this rank's
shards, as the FSDP engine's (same schedule, same settings); with ``use_distributed_optimizer`` its state is further
split over the data-parallel replicas (:mod:`verl.workers.engine.megatron.distributed_optimizer`: the gradients
reduce-scattered into each rank's slice instead of all-reduced, the slices all-gathered after the step).
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
from verl.protocol import DataProto, all_gather_data_proto
from verl.utils.device import is_accelerator_available
from verl.workers.engine.base import LossFn, TrainingEngine
from verl.workers.engine.micro_batches import make_micro_batches, restore_order, to_device
from verl.workers.engine.pretrained import PretrainedFiles
from verl.workers.engine.registry import register_engine
from verl.workers.sharding_manager.base import BaseShardingManager

logger = logging.getLogger(__name__)

__all__ = ["MegatronEngine"]

_FORWARD_KEYS = ["responses", "input_ids", "attention_mask", "position_ids"]
_SCORE_KEYS = ["input_ids", "attention_mask", "position_ids"]  # re-tokenized reward-model inputs have no responses


def _pad_responses(values: torch.Tensor, response_length: int) -> torch.Tensor:
    missing = response_length - values.shape[-1]
    return values if missing == 0 else nn.functional.pad(values, (0, missing))


def _in_layout(method):
    """Run an engine method inside the engine's megatron-core layout (its tensor x pipeline groups): roles of one
    process may use different parallel sizes (:mod:`verl.workers.engine.megatron.parallel`)."""

    @functools.wraps(method)
    def wrapper(self, *args, **kwargs):
        from verl.workers.engine.megatron.parallel import model_parallel_layout

        with model_parallel_layout(self.layout):
            return method(self, *args, **kwargs)

    return wrapper


def _counted_in_norm(param: nn.Parameter, tp_rank: int) -> bool:
    """Whether ``param``'s gradient enters the global norm on this rank: each tensor-parallel duplicate on tp rank 0
    only, the last stage's copy of a tied embedding (``shared``) not at all."""
    if getattr(param, "shared", False):
        return False
    return bool(getattr(param, "tensor_model_parallel", False)) or tp_rank == 0


def _sharded_flat_params(model: nn.Module):
    """``use_distributed_optimizer``: this data-parallel rank's slice of ``model``'s trainable parameters."""
    from megatron.core import parallel_state

    from verl.workers.engine.megatron.distributed_optimizer import ShardedFlatParams

    tp_rank = parallel_state.get_tensor_model_parallel_rank()
    params = [p for p in model.parameters() if p.requires_grad]
    counted = [_counted_in_norm(p, tp_rank) for p in params]
    return ShardedFlatParams(params, counted, parallel_state.get_data_parallel_group())


def _section_flag(section, name: str, default: bool) -> bool:
    """A role section's plain key (``load_weight``), read from its typed fields or its extra keys."""
    if hasattr(section, name):
        return bool(getattr(section, name))
    extra = getattr(section, "extra", None) or {}
    return bool(extra.get(name, default))


@register_engine("megatron")
class MegatronEngine(TrainingEngine):
    """A policy, value or reward model under megatron-core tensor and pipeline parallelism, with its optimizer when
    trained."""

    def __init__(
        self,
        model: nn.Module,
        hf_config,
        optimizer: torch.optim.Optimizer | None = None,
        lr_scheduler=None,
        *,
        kind: str = "policy",
        grad_clip: float | None = None,
        checkpoint_config=None,
        processing_class=None,
        sharded_params=None,
    ):
        from megatron.core import parallel_state

        from verl.workers.engine.megatron.parallel import active_layout
        from verl.workers.engine.megatron.pipeline import StageRunner

        if kind not in ("policy", "value", "score"):
            raise ValueError(f"kind={kind!r}: expected 'policy', 'value' or 'score'")
        self.kind = kind
        self.layout = active_layout()  # the groups the model was built with; every call runs in them
        self._module = model
        self.hf_config = hf_config
        self.optimizer = optimizer
        self.lr_scheduler = lr_scheduler
        self.grad_clip = grad_clip
        self.checkpoint_config = checkpoint_config
        self.processing_class = processing_class
        self.sharded_params = sharded_params  # use_distributed_optimizer: the optimizer steps this rank's slice
        self.dtype = model.config.params_dtype
        self.stages = StageRunner(model, hf_config.hidden_size, self.dtype)
        self.mp_group = parallel_state.get_model_parallel_group()
        self.mp_size = dist.get_world_size(self.mp_group)
        # the ranks that run the same rows: the model-parallel group and, with expert parallelism, its expert-parallel
        # peers (they hold the other experts of the same layers: see _reduce_expert_gradients)
        self.ep_size = parallel_state.get_expert_model_parallel_world_size()
        self.row_group = self.mp_group
        if self.ep_size > 1:
            self.row_group = parallel_state.get_expert_tensor_model_pipeline_parallel_group()
        self.row_size = dist.get_world_size(self.row_group)
        self.pp_size = parallel_state.get_pipeline_model_parallel_world_size()
        self.pp_group = parallel_state.get_pipeline_model_parallel_group()
        self.dp_group = parallel_state.get_data_parallel_group()
        self.dp_size = dist.get_world_size(self.dp_group)
        self.device = torch.device("cpu")
        self._hf_rollout = None
        self._checkpoint_manager = None

    # ------------------------------------------------------------------------------------------------ building
    @classmethod
    def build(cls, role: str, config, files: PretrainedFiles) -> MegatronEngine:
        from verl.workers.engine.fsdp.setup import build_optimizer
        from verl.workers.engine.megatron.model import build_model_chunks, transformer_config
        from verl.workers.engine.megatron.parallel import init_model_parallel
        from verl.workers.engine.megatron.settings import check_megatron_settings, megatron_settings
        from verl.workers.engine.megatron.weights import load_hf_weights

        if role in ("actor", "rollout", "ref"):
            section = config.ref if role == "ref" else config.actor
            key = f"actor_rollout_ref.{'ref' if role == 'ref' else 'actor'}.megatron"
            kind, trainable = "policy", role == "actor"
            train_section, processing_class = config.actor, files.processor or files.tokenizer
        elif role in ("critic", "reward_model"):
            section, key = config, f"{role}.megatron"
            kind, trainable = ("value", True) if role == "critic" else ("score", False)
            train_section, processing_class = config, files.tokenizer
        else:
            raise ValueError(f"role={role!r}: expected actor, rollout, ref, critic or reward_model")
        settings = megatron_settings(section)
        check_megatron_settings(settings, key, dist.get_world_size(), trainable)
        vpp = settings.virtual_pipeline_model_parallel_size
        vpp = None if vpp == 1 else vpp  # one model chunk per stage: megatron-core's plain layout
        ep = settings.expert_model_parallel_size
        init_model_parallel(
            settings.tensor_model_parallel_size, settings.pipeline_model_parallel_size, settings.seed, vpp, ep
        )
        # fp32 masters for training and on CPU (bf16 is emulated there); bf16 for frozen models on accelerators
        dtype = torch.float32 if trainable or not is_accelerator_available() else torch.bfloat16
        overrides = dict(settings.override_transformer_config or {})
        tf_config = transformer_config(
            files.hf_config,
            tp_size=settings.tensor_model_parallel_size,
            pp_size=settings.pipeline_model_parallel_size,
            dtype=dtype,
            sequence_parallel=settings.sequence_parallel,
            vpp_size=vpp,
            **({"expert_model_parallel_size": ep} if ep > 1 else {}),
            **overrides,
        )
        model = build_model_chunks(files.hf_config, tf_config, scalar_head=kind != "policy", seed=settings.seed)
        if settings.use_dist_checkpointing:  # start from a megatron-core distributed checkpoint, at any sizes
            from verl.workers.engine.megatron.checkpoint import load_model_from_dist_checkpoint

            load_model_from_dist_checkpoint(model, settings.dist_checkpointing_path)
        elif _section_flag(section, "load_weight", True):
            load_hf_weights(model, files.hf_config, files.local_path)
        optimizer = lr_scheduler = sharded = None
        if trainable and settings.use_distributed_optimizer:
            sharded = _sharded_flat_params(model)
            optimizer, lr_scheduler = build_optimizer(nn.ParameterList([sharded.master]), train_section.optim)
        elif trainable:
            optimizer, lr_scheduler = build_optimizer(model, train_section.optim)
        else:
            model.requires_grad_(False)
        return cls(
            model,
            files.hf_config,
            optimizer,
            lr_scheduler,
            kind=kind,
            grad_clip=train_section.grad_clip if trainable else None,
            checkpoint_config=train_section.checkpoint if trainable else None,
            processing_class=processing_class,
            sharded_params=sharded,
        )

    @property
    def trainable(self) -> bool:
        return self.optimizer is not None

    @property
    def module(self) -> nn.Module:
        return self._module

    # ------------------------------------------------------------------------------------------------ forwards
    def _run_stage(self, input_ids: torch.Tensor, attention_mask: torch.Tensor, position_ids: torch.Tensor):
        """This pipeline stage on one micro batch ``(b, s)``: on the last stage the model's output ``(b, s, vocab)``
        (policy) or ``(b, s, 1)`` (value / score), None elsewhere."""
        from verl.workers.engine.megatron.cpu_shims import cpu_current_device
        from verl.workers.engine.megatron.model import causal_padding_mask, pad_sequence_for_parallelism

        config = self._module.config
        seq_len = input_ids.shape[1]
        input_ids, attention_mask, position_ids = pad_sequence_for_parallelism(
            config, input_ids, attention_mask, position_ids
        )
        mask = causal_padding_mask(attention_mask)
        # the hidden states between stages: this rank's share of the positions under sequence parallelism
        stage_len = input_ids.shape[1] // (config.tensor_model_parallel_size if config.sequence_parallel else 1)

        def run_stage(chunk):
            with cpu_current_device():
                return chunk(input_ids=input_ids, position_ids=position_ids, attention_mask=mask)

        output = self.stages.forward(run_stage, input_ids.shape[0], stage_len, torch.is_grad_enabled())
        return None if output is None else output[:, :seq_len]

    def _trimmed_stage(self, micro_batch: dict) -> tuple[torch.Tensor | None, int, int]:
        """:meth:`_run_stage` on ``micro_batch`` without its all-padding columns; with the number of response
        columns kept and the full response length."""
        from verl.workers.engine.fsdp.hf_forward import trim_padding_columns

        response_length = micro_batch["responses"].size(-1)
        input_ids, attention_mask, position_ids, kept = trim_padding_columns(
            micro_batch["input_ids"], micro_batch["attention_mask"], micro_batch["position_ids"], response_length
        )
        return self._run_stage(input_ids, attention_mask, position_ids), kept, response_length

    def _value_stage_forward(self, micro_batch: dict) -> torch.Tensor | None:
        """On the last stage, values ``(b, response_length)``: the prediction at the state before each response
        token (the FSDP critic's)."""
        output, kept, response_length = self._trimmed_stage(micro_batch)
        if output is None:
            return None
        return _pad_responses(output.squeeze(-1)[:, -kept - 1 : -1], response_length)

    def _score_stage_forward(self, micro_batch: dict) -> torch.Tensor | None:
        """On the last stage, scores ``(b,)``: the model's output at each row's last valid token."""
        attention_mask, position_ids = micro_batch["attention_mask"], micro_batch["position_ids"]
        output = self._run_stage(micro_batch["input_ids"], attention_mask, position_ids)
        if output is None:
            return None
        last = torch.argmax(position_ids * attention_mask, dim=-1)
        return output.squeeze(-1)[torch.arange(output.shape[0]), last]

    def _stage_forward(self, micro_batch: dict, temperature: float, calculate_entropy: bool, entropy_grad: bool):
        """Run this stage on ``micro_batch``; on the last stage return ``(log_probs, entropy)`` of the responses."""
        responses = micro_batch["responses"]
        output, kept, response_length = self._trimmed_stage(micro_batch)
        if output is None:
            return None
        logits = output[..., : self.hf_config.vocab_size] / temperature
        logits = logits[:, -kept - 1 : -1]
        labels = responses[:, :kept]
        entropy = None
        if not calculate_entropy:
            log_probs = verl_F.logprobs_from_logits(logits, labels)
        elif not (entropy_grad and torch.is_grad_enabled()):
            log_probs, entropy = verl_F.logprobs_and_entropy_from_logits(logits, labels)
        else:
            log_probs, entropy = verl_F.logprobs_from_logits(logits, labels), verl_F.entropy_from_logits(logits)
        log_probs = _pad_responses(log_probs, response_length)
        if entropy is not None:
            entropy = _pad_responses(entropy, response_length)
        return log_probs, entropy

    # ------------------------------------------------------------------------------------------ data movement
    def _gather_model_parallel(self, data: DataProto) -> DataProto:
        """The rows of every rank of this model-parallel group (rank order): the batch this copy of the model runs."""
        if self.row_size == 1:
            return data
        data = DataProto(batch=data.batch, non_tensor_batch=dict(data.non_tensor_batch), meta_info=data.meta_info)
        all_gather_data_proto(data, self.row_group)
        return data

    def _own_rows(self, tensor: torch.Tensor) -> torch.Tensor:
        """This rank's rows of a result computed for its whole model-parallel group."""
        if self.row_size == 1:
            return tensor
        return tensor.chunk(self.row_size)[dist.get_rank(self.row_group)]

    def _from_last_stage(self, outputs: dict[str, torch.Tensor] | None, shapes: dict[str, tuple]) -> dict:
        """The last pipeline stage's ``outputs`` on every stage (broadcast over the pipeline group)."""
        if self.pp_size == 1:
            return outputs
        src = dist.get_process_group_ranks(self.pp_group)[-1]
        result = {}
        for key, shape in shapes.items():
            tensor = outputs[key].contiguous() if self.stages.is_last else torch.empty(shape, dtype=torch.float32)
            dist.broadcast(tensor, src=src, group=self.pp_group)
            result[key] = tensor
        return result

    # ------------------------------------------------------------------------------------------ the interface
    @_in_layout
    def infer(self, data: DataProto) -> dict[str, torch.Tensor]:
        meta = data.meta_info
        data = self._gather_model_parallel(data)
        use_dynamic_bsz = meta.get("use_dynamic_bsz", False)
        keys = _SCORE_KEYS if self.kind == "score" else _FORWARD_KEYS
        micro_batch_size = meta.get("micro_batch_size") or (len(data) if self.kind == "score" else None)
        micro_batches, partitions = make_micro_batches(
            data, keys, micro_batch_size, use_dynamic_bsz, meta.get("max_token_len")
        )
        if self.kind != "policy":
            return self._infer_scalar(data, micro_batches, partitions)
        calculate_entropy = meta.get("calculate_entropy", False)
        self._module.eval()
        log_probs, entropys = [], []
        with torch.no_grad():
            for micro_batch in micro_batches:
                micro_batch = to_device(micro_batch, self.device)
                out = self._stage_forward(micro_batch, meta["temperature"], calculate_entropy, False)
                if out is not None:
                    log_probs.append(out[0].float())
                    if calculate_entropy:
                        entropys.append(out[1].float())
        shape = tuple(data.batch["responses"].shape)
        outputs = None
        if self.stages.is_last:
            outputs = {"log_probs": restore_order(torch.cat(log_probs), partitions)}
            if calculate_entropy:
                outputs["entropys"] = restore_order(torch.cat(entropys), partitions)
        keys = ["log_probs"] + (["entropys"] if calculate_entropy else [])
        outputs = self._from_last_stage(outputs, dict.fromkeys(keys, shape))
        return {key: self._own_rows(value) for key, value in outputs.items()}

    def _infer_scalar(self, data: DataProto, micro_batches: list[dict], partitions) -> dict[str, torch.Tensor]:
        """Values ``(bs, response_length)`` or scores ``(bs,)`` of the gathered ``data``, this rank's rows."""
        forward = self._value_stage_forward if self.kind == "value" else self._score_stage_forward
        self._module.eval()
        results = []
        with torch.no_grad():
            for micro_batch in micro_batches:
                out = forward(to_device(micro_batch, self.device))
                if out is not None:
                    results.append(out.float())
        key = "values" if self.kind == "value" else "scores"
        shape = tuple(data.batch["responses"].shape) if self.kind == "value" else (len(data),)
        outputs = {key: restore_order(torch.cat(results), partitions)} if self.stages.is_last else None
        outputs = self._from_last_stage(outputs, {key: shape})
        return {key: self._own_rows(outputs[key])}

    @contextlib.contextmanager
    def training(self, data: DataProto) -> Iterator[DataProto]:
        from verl.workers.engine.megatron.parallel import model_parallel_layout

        self._module.train()
        with model_parallel_layout(self.layout):
            data = self._gather_model_parallel(data)
        yield data

    def micro_batches(
        self, data: DataProto, micro_batch_size: int | None, use_dynamic_bsz: bool, max_token_len: int | None
    ) -> list[dict]:
        micro_batches, _ = make_micro_batches(
            data, list(data.batch.keys()), micro_batch_size, use_dynamic_bsz, max_token_len
        )
        return micro_batches

    @_in_layout
    def forward_backward(self, micro_batch: dict, loss_fn: LossFn, **forward_kwargs) -> dict[str, float]:
        from verl.workers.engine.megatron.cpu_shims import cpu_current_device

        micro_batch = to_device(micro_batch, self.device)
        loss, metrics = None, None
        if self.kind == "value":
            values = self._value_stage_forward(micro_batch)
            if values is not None:
                loss, metrics = loss_fn({"values": values}, micro_batch)
        elif self.kind == "policy":
            temperature = forward_kwargs.get("temperature", 1.0)
            calculate_entropy = forward_kwargs.get("calculate_entropy", False)
            entropy_grad = forward_kwargs.get("entropy_grad", True)
            out = self._stage_forward(micro_batch, temperature, calculate_entropy, entropy_grad)
            if out is not None:
                log_probs, entropy = out
                loss, metrics = loss_fn({"log_probs": log_probs, "entropy": entropy}, micro_batch)
        else:
            raise NotImplementedError(f"a {self.kind!r} model is not trained")
        with cpu_current_device():
            self.stages.backward(loss)
        if self.pp_size > 1:  # the loss's metrics exist on the last stage: every rank reports them
            box = [metrics]
            dist.broadcast_object_list(box, src=dist.get_process_group_ranks(self.pp_group)[-1], group=self.pp_group)
            metrics = box[0]
        return metrics

    def zero_grad(self) -> None:
        self.optimizer.zero_grad()
        if self.sharded_params is not None:
            self._module.zero_grad(set_to_none=True)

    def _reduce_gradients(self) -> None:
        """Sum the partial gradients of replicated tensors over tensor parallelism (Qwen3's q/k norms); average the
        gradients over data-parallel replicas (into this rank's slice with the distributed optimizer); sum the tied
        embedding's two copies' gradients."""
        from megatron.core import parallel_state

        from verl.workers.engine.megatron.model import sum_partial_gradients

        sum_partial_gradients(self._module)
        params = [p for p in self._module.parameters() if p.requires_grad and p.grad is not None]
        if self.ep_size > 1:
            params = self._reduce_expert_gradients(params)
        if self.sharded_params is None and self.dp_size > 1 and params:
            flat = torch._utils._flatten_dense_tensors([p.grad for p in params])
            dist.all_reduce(flat, group=self.dp_group)
            flat /= self.dp_size
            for p, g in zip(params, torch._utils._unflatten_dense_tensors(flat, [p.grad for p in params])):
                p.grad.copy_(g)
        tied = self._module.share_embeddings_and_output_weights  # never for a value / reward model (scalar head)
        if self.pp_size > 1 and tied and parallel_state.is_rank_in_embedding_group():
            model = self._module
            weight = model.embedding.word_embeddings.weight if model.pre_process else model.output_layer.weight
            if weight.grad is None:
                weight.grad = torch.zeros_like(weight)
            dist.all_reduce(weight.grad, group=parallel_state.get_embedding_group())
        if self.sharded_params is not None:
            self.sharded_params.reduce_gradients()

    def _reduce_expert_gradients(self, params: list[nn.Parameter]) -> list[nn.Parameter]:
        """Expert parallelism: average this rank's experts' gradients over the replicas of those experts (the expert
        data-parallel group) and undo the row sharing (every expert-parallel peer runs the same rows, so each expert
        saw each token once per peer); returns the other parameters, which the data-parallel average takes."""
        from megatron.core import parallel_state

        experts = {p for name, p in self._module.named_parameters() if ".mlp.experts." in f".{name}"}
        group = parallel_state.get_expert_data_parallel_group()
        replicas = dist.get_world_size(group)
        for p in params:
            if p in experts:
                if replicas > 1:
                    dist.all_reduce(p.grad, group=group)
                p.grad /= replicas * self.ep_size
        return [p for p in params if p not in experts]

    def _grad_norm(self) -> torch.Tensor:
        """The global gradient norm: every shard once (tensor-parallel duplicates on tp rank 0 only, the last stage's
        copy of a tied embedding not at all), summed over the model-parallel group."""
        from megatron.core import parallel_state

        tp_rank = parallel_state.get_tensor_model_parallel_rank()
        squares = torch.zeros((), dtype=torch.float32)
        if self.sharded_params is not None:  # this rank's slice; the other replicas hold the rest
            squares += self.sharded_params.grad_squares()
            if self.dp_size > 1:
                dist.all_reduce(squares, group=self.dp_group)
        else:
            expert_squares = torch.zeros((), dtype=torch.float32)  # expert parallelism: other experts on each peer
            for name, p in self._module.named_parameters():
                if p.grad is not None and _counted_in_norm(p, tp_rank):
                    is_expert = self.ep_size > 1 and ".mlp.experts." in f".{name}"
                    (expert_squares if is_expert else squares).add_(p.grad.detach().float().pow(2).sum())
            if self.ep_size > 1:
                dist.all_reduce(expert_squares, group=parallel_state.get_expert_tensor_model_pipeline_parallel_group())
                squares = squares + expert_squares / self.mp_size  # the model-parallel sum below counts it mp times
        if self.mp_size > 1:
            dist.all_reduce(squares, group=self.mp_group)
        return squares.sqrt()

    @_in_layout
    def optimizer_step(self) -> torch.Tensor:
        if self.grad_clip is None:
            raise ValueError("grad_clip is None: set actor.grad_clip / critic.grad_clip (verl's default is 1.0)")
        self._reduce_gradients()
        grad_norm = self._grad_norm()
        if not torch.isfinite(grad_norm):
            logger.warning("grad_norm is not finite (%s): skipping this optimizer step", grad_norm.item())
            self.zero_grad()
            return grad_norm
        coefficient = self.grad_clip / (grad_norm + 1e-6)
        if coefficient < 1:
            for p in self._module.parameters() if self.sharded_params is None else [self.sharded_params.master]:
                if p.grad is not None:
                    p.grad.mul_(coefficient)
        self.optimizer.step()
        if self.sharded_params is not None:
            self.sharded_params.gather_parameters()
        return grad_norm

    def lr(self) -> float:
        return self.lr_scheduler.get_last_lr()[0]

    def lr_scheduler_step(self) -> None:
        self.lr_scheduler.step()

    def resident(self, with_optimizer: bool = False):
        # param_offload / grad_offload / optimizer_offload ask for host memory between calls: the engine keeps the
        # model, its gradients and the optimizer state there for good (self.device is the CPU; the config check
        # refuses another trainer.device), so there is nothing to load or offload around a call
        return contextlib.nullcontext()

    # ------------------------------------------------------------------------------------------ weight hand-off
    def hf_weights(self, dtype: torch.dtype | None = None) -> Iterator[tuple[str, torch.Tensor]]:
        """The current weights as full HF-named tensors, layer by layer (collective: every rank iterates to the end;
        see :func:`verl.workers.engine.megatron.weights.iter_hf_weights`); ``dtype``: cast to it on the way."""
        from verl.workers.engine.megatron.parallel import model_parallel_layout
        from verl.workers.engine.megatron.weights import iter_hf_weights

        # each step of the stream runs in this engine's layout (the consumer may run other roles in between)
        stream = iter_hf_weights(self._module, self.hf_config, dtype)
        while True:
            with model_parallel_layout(self.layout):
                item = next(stream, None)
            if item is None:
                return
            yield item

    def hf_rollout_module(self) -> tuple[nn.Module, BaseShardingManager]:
        from verl.workers.engine.megatron.handoff import HFModelHandoff, empty_hf_model

        if self._hf_rollout is None:
            model = empty_hf_model(self.hf_config, self.dtype)
            self._hf_rollout = model, HFModelHandoff(self, model)
        return self._hf_rollout

    @_in_layout
    def rollout_weight_handoff(self, rollout, hf_config, rollout_config, device_mesh):
        from verl.workers.engine.megatron.handoff import vllm_handoff

        return vllm_handoff(self, rollout.inference_engine, device_mesh, rollout_config.free_cache_engine)

    # ------------------------------------------------------------------------------------------ checkpoints
    def _checkpointer(self):
        if self._checkpoint_manager is None:
            from verl.workers.engine.megatron.checkpoint import MegatronCheckpointManager

            self._checkpoint_manager = MegatronCheckpointManager(self, self.checkpoint_config)
        return self._checkpoint_manager

    @_in_layout
    def save_checkpoint(self, local_path: str, hdfs_path=None, global_step: int = 0, max_ckpt_to_keep=None) -> None:
        self._checkpointer().save_checkpoint(local_path, hdfs_path, global_step, max_ckpt_to_keep)

    @_in_layout
    def load_checkpoint(self, local_path: str, hdfs_path=None, del_local_after_load: bool = False) -> None:
        self._checkpointer().load_checkpoint(local_path, hdfs_path, del_local_after_load)
        if self.sharded_params is not None:
            self.sharded_params.refresh_master()
