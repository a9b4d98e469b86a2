"""A rollout on workers of its own (``actor_rollout_ref.hybrid_engine=False``): the inference engine alone, fed by
the checkpoint engine instead of a colocated actor.

Each rollout rank holds a whole copy of the policy, the only model it has (no optimizer, no training shards):
the HF rollout samples from a plain HF model loaded from the checkpoint; vLLM loads the checkpoint itself (or dummy
weights with ``load_format: dummy*``, which a first weight sync must replace before anything is generated). New
weights arrive as a stream of full HF-named tensors (:mod:`verl.checkpoint_engine`) and load the way the hybrid
engine's hand-offs load them: tensor by tensor into the HF model, through ``reload_weights`` into vLLM.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable

import torch
import torch.distributed as dist

from verl.utils.device import get_device_name, is_accelerator_available
from verl.workers.sharding_manager.base import BaseShardingManager

__all__ = ["StandaloneRollout", "build_standalone_rollout"]

WeightLoader = Callable[[Iterable[tuple[str, torch.Tensor]]], None]


class StandaloneRollout:
    """What a standalone rollout rank holds: ``rollout`` (HF or vLLM), the ``sharding_manager`` to generate inside
    (vLLM: RNG and inference-TP data split; HF: None), ``load_weights`` for a received stream, the HF ``module`` the
    HF rollout samples from (None for vLLM), and whether its weights are still dummies (``needs_weights``)."""

    def __init__(
        self,
        rollout,
        sharding_manager: BaseShardingManager | None,
        load_weights: WeightLoader,
        module: torch.nn.Module | None,
        needs_weights: bool,
        generation_config=None,
    ):
        self.rollout = rollout
        self.sharding_manager = sharding_manager
        self._load = load_weights
        self.module = module
        self.needs_weights = needs_weights
        self.generation_config = generation_config

    def load_weights(self, weights: Iterable[tuple[str, torch.Tensor]]) -> None:
        """Load a full set of HF-named tensors (e.g. :meth:`CheckpointEngine.receive_weights`)."""
        self._load(weights)
        self.needs_weights = False


def _hf_rollout(config, files) -> StandaloneRollout:
    from verl.workers.engine.pretrained import policy_auto_class
    from verl.workers.rollout import HFRollout, NaiveRollout
    from verl.workers.sharding_manager.fsdp_weights import load_full_weights

    device = get_device_name() if is_accelerator_available() else "cpu"
    # float32 like the actor's master weights, so a synced copy equals them bit for bit; the HF rollout decodes in
    # rollout.dtype where it pays off (see HFRollout.generation_context)
    module = policy_auto_class(files.hf_config).from_pretrained(
        files.local_path,
        config=files.hf_config,
        dtype=torch.float32,
        trust_remote_code=config.model.trust_remote_code,
        attn_implementation="sdpa",
    )
    module = module.to(device).eval().requires_grad_(False)
    rollout_cls = HFRollout if config.rollout.name == "hf" else NaiveRollout
    return StandaloneRollout(
        rollout_cls(module, config.rollout),
        None,
        lambda weights: load_full_weights(module, weights),
        module,
        needs_weights=False,
        generation_config=getattr(module, "generation_config", None),
    )


def _vllm_rollout(config, files) -> StandaloneRollout:
    from torch.distributed.device_mesh import init_device_mesh

    from verl.workers.rollout.vllm_rollout import vLLMRollout
    from verl.workers.sharding_manager.fsdp_vllm import FSDPVLLMShardingManager, load_weights_into_vllm

    rollout_config = config.rollout
    # nothing else lives on these devices: the engine keeps its weights and KV cache between generations
    rollout_config.free_cache_engine = False
    infer_tp = rollout_config.tensor_model_parallel_size
    world_size = dist.get_world_size()
    if world_size % infer_tp != 0:
        raise ValueError(
            f"actor_rollout_ref.rollout.tensor_model_parallel_size={infer_tp} must divide the number of rollout "
            f"workers ({world_size})"
        )
    mesh = init_device_mesh(get_device_name(), (world_size // infer_tp, infer_tp), mesh_dim_names=("dp", "infer_tp"))
    rollout = vLLMRollout(
        model_path=files.local_path,
        config=rollout_config,
        tokenizer=files.tokenizer,
        model_hf_config=files.hf_config,
        trust_remote_code=config.model.trust_remote_code,
        tokenizer_path=files.tokenizer_path,
        hf_config_path=files.hf_config_path,
    )
    manager = FSDPVLLMShardingManager(
        module=None,
        inference_engine=rollout.inference_engine,
        model_config=files.hf_config,
        device_mesh=mesh,
        load_format=rollout_config.load_format,
        free_cache_engine=False,
    )
    tied = bool(getattr(files.hf_config, "tie_word_embeddings", False))
    generation_config = None
    try:
        from transformers import GenerationConfig

        generation_config = GenerationConfig.from_pretrained(files.local_path)
    except OSError:  # a checkpoint without generation_config.json
        pass
    return StandaloneRollout(
        rollout,
        manager,
        lambda weights: load_weights_into_vllm(rollout.inference_engine, weights, tied),
        None,
        needs_weights=rollout_config.load_format.startswith("dummy"),
        generation_config=generation_config,
    )


def build_standalone_rollout(config, files) -> StandaloneRollout:
    """The rollout engine of a standalone rollout rank. ``config``: the ``actor_rollout_ref`` section; ``files``:
    the policy's :class:`~verl.workers.engine.pretrained.PretrainedFiles`."""
    name = config.rollout.name
    if name in ("hf", "naive"):
        return _hf_rollout(config, files)
    if name == "vllm":
        return _vllm_rollout(config, files)
    raise ValueError(f"actor_rollout_ref.rollout.name={name!r} is not supported here; expected hf or vllm")
