"""The Megatron engine's weights handed to a rollout engine around each generation (the 3D-HybridEngine hand-off).

Both rollouts take the same stream, :meth:`MegatronEngine.hf_weights`: full HF-named tensors gathered from the tensor-
and pipeline-parallel shards one layer at a time, so no second full copy of the training weights is built on the
way. The HF rollout samples from an HF model of its own (:func:`empty_hf_model`) that :class:`HFModelHandoff` fills
in place; vLLM reloads the stream into its engine exactly as for the FSDP engine
(:func:`vllm_handoff`: the FSDP engine's manager with this stream as its source).
"""

from __future__ import annotations

import re
import time

import torch
import torch.nn as nn

from verl.workers.sharding_manager.base import BaseShardingManager

__all__ = ["HFModelHandoff", "empty_hf_model", "vllm_handoff"]


def empty_hf_model(hf_config, dtype: torch.dtype) -> nn.Module:
    """The HF causal LM of ``hf_config`` for the HF rollout; its weights come from the hand-off (sdpa attention)."""
    from transformers import AutoModelForCausalLM

    model = AutoModelForCausalLM.from_config(hf_config, dtype=dtype, attn_implementation="sdpa")
    return model.eval().requires_grad_(False)


class HFModelHandoff(BaseShardingManager):
    """On entry, copy the engine's current weights into ``model`` tensor by tensor (collective over the engine's
    ranks). ``timing["reshard"]``: the seconds the last copy took."""

    def __init__(self, engine, model: nn.Module):
        super().__init__()
        self.engine = engine
        self.model = model

    @torch.no_grad()
    def __enter__(self):
        start = time.perf_counter()
        params = dict(self.model.named_parameters())
        for name, tensor in self.engine.hf_weights():
            _target(params, name).copy_(tensor)
        self.timing["reshard"] = time.perf_counter() - start
        return self


_EXPERT = re.compile(r"(.*\.experts)\.(\d+)\.(gate|up|down)_proj\.weight")


def _target(params: dict[str, torch.Tensor], name: str) -> torch.Tensor:
    """The in-memory tensor (or slice) of ``params`` that the checkpoint-named weight ``name`` fills: itself, or where
    transformers (>= 5) fuses a mixture of experts' weights in memory (``experts.gate_up_proj`` ``(E, 2I, H)``, gate
    rows first; ``experts.down_proj`` ``(E, H, I)``), expert ``e``'s part of the fused tensor."""
    if name in params:
        return params[name]
    match = _EXPERT.fullmatch(name)
    if match is None:
        raise KeyError(f"the hand-off sent {name!r}, which the HF rollout model has no tensor for")
    prefix, expert, kind = match.group(1), int(match.group(2)), match.group(3)
    if kind == "down":
        return params[f"{prefix}.down_proj"][expert]
    gate_up = params[f"{prefix}.gate_up_proj"][expert]
    half = gate_up.shape[0] // 2
    return gate_up[:half] if kind == "gate" else gate_up[half:]


def vllm_handoff(engine, inference_engine, device_mesh, free_cache_engine: bool = False) -> BaseShardingManager:
    """The FSDP engine's vLLM hand-off (:class:`~verl.workers.sharding_manager.fsdp_vllm.FSDPVLLMShardingManager`:
    reload, memory release, inference-TP data split) fed by the Megatron engine's gathered stream. Needs vLLM."""
    from verl.workers.sharding_manager.fsdp_vllm import FSDPVLLMShardingManager

    class MegatronVLLMShardingManager(FSDPVLLMShardingManager):
        def _full_weights(self):
            return engine.hf_weights()

    return MegatronVLLMShardingManager(
        engine.module,
        inference_engine,
        engine.hf_config,
        device_mesh=device_mesh,
        load_format="hf",
        free_cache_engine=free_cache_engine,
    )
