"""Merge the per-rank shards of a Megatron engine checkpoint (``global_step_N/actor``) into a Hugging Face model.

The checkpoint's ``megatron_config.json`` says which (tensor, pipeline, data) parallel coordinates each rank's
``model_world_size_{W}_rank_{r}.pt`` holds; the shards of data-parallel replica 0 are merged stage by stage into HF
names (:func:`verl.workers.engine.megatron.weights.merge_stage_shards`: pure torch, no megatron-core or GPU needed).
Megatron's distributed-checkpoint layout (``use_dist_checkpointing``) is not read here.
"""

from __future__ import annotations

import json
import logging
import os

import torch

from verl.model_merger.base_model_merger import BaseModelMerger, ModelMergerConfig

logger = logging.getLogger(__name__)

__all__ = ["MegatronModelMerger"]


def _chunk_state(state: dict, chunk: int) -> dict:
    """Model chunk ``chunk``'s ``GPTModel`` state dict out of a virtual-pipeline stage's (keys ``"<chunk>.<key>"``)."""
    prefix = f"{chunk}."
    return {k[len(prefix) :]: v for k, v in state.items() if k.startswith(prefix)}


def _global_experts(state: dict, ep_rank: int) -> dict:
    """The expert tensors of expert-parallel rank ``ep_rank``'s state dict, their local indices made global
    (``ep_rank * n_local + i``; every rank holds ``n_local`` experts of each layer)."""
    marker = ".mlp.experts.local_experts."
    experts = {k: v for k, v in state.items() if marker in k}
    n_local = len({k.split(marker)[1].split(".")[0] for k in experts if ".layers.0." in k}) or 1
    renamed = {}
    for key, value in experts.items():
        head, rest = key.split(marker)
        index, tail = rest.split(".", 1)
        renamed[f"{head}{marker}{ep_rank * n_local + int(index)}.{tail}"] = value
    return renamed


class MegatronModelMerger(BaseModelMerger):
    """``--backend megatron``: the engine's per-rank checkpoint into one HF state dict."""

    def __init__(self, config: ModelMergerConfig):
        super().__init__(config)
        path = os.path.join(config.local_dir, "megatron_config.json")
        if not os.path.isfile(path):
            raise FileNotFoundError(
                f"no megatron_config.json in {config.local_dir!r}: --local_dir must be a Megatron engine checkpoint "
                "folder such as .../global_step_N/actor"
            )
        with open(path) as f:
            self.layout = json.load(f)

    def load_merged_state_dict(self) -> dict[str, torch.Tensor]:
        """The full HF-named state dict (stages in order, each from its tensor-parallel ranks of replica 0)."""
        from verl.workers.engine.megatron.weights import merge_stage_shards

        layout = self.layout
        world, tp = layout["world_size"], layout["tensor_model_parallel_size"]
        pp = layout["pipeline_model_parallel_size"]
        vpp = layout.get("virtual_pipeline_model_parallel_size")  # model chunks per stage; None: one GPTModel
        ep = layout.get("expert_model_parallel_size", 1)  # expert-parallel rank r's files hold experts r * n_local...
        ranks = {
            (c["pp_rank"], c["tp_rank"], c.get("ep_rank", 0)): r
            for r, c in enumerate(layout["ranks"])
            if c.get("edp_rank", c["dp_rank"]) == 0
        }

        def load(stage: int, t: int, e: int) -> dict:
            name = f"model_world_size_{world}_rank_{ranks[(stage, t, e)]}.pt"
            return torch.load(os.path.join(self.config.local_dir, name), map_location="cpu", weights_only=False)

        merged: dict[str, torch.Tensor] = {}
        for stage in range(pp):
            stage_shards = []
            for t in range(tp):
                shard = load(stage, t, 0)
                for e in range(1, ep):
                    shard.update(_global_experts(load(stage, t, e), e))
                stage_shards.append(shard)
            for chunk in range(vpp or 1):
                shards = stage_shards if vpp is None else [_chunk_state(s, chunk) for s in stage_shards]
                # virtual stage chunk * pp + stage holds the layers after those of the virtual stages before it
                first = chunk * pp + stage if vpp else stage
                layers_per_chunk = self.model_config.num_hidden_layers // (pp * (vpp or 1))
                offset = first * layers_per_chunk
                merged.update(merge_stage_shards(shards, self.model_config, offset))
        return merged

    def _in_memory_names(self, state: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
        """``state`` (the checkpoint's names) in the names of the transformers model it builds: transformers >= 5
        keeps a mixture of experts' per-expert weights as two fused tensors per layer, ``experts.gate_up_proj``
        ``(E, 2I, H)`` (gate rows first) and ``experts.down_proj`` ``(E, H, I)``."""
        with torch.device("meta"):
            names = {
                n for n, _ in self.get_transformers_auto_model_class().from_config(self.model_config).named_parameters()
            }
        state = dict(state)
        for name in sorted(names - state.keys()):
            prefix, _, kind = name.rpartition(".")
            if not prefix.endswith(".experts") or kind not in ("gate_up_proj", "down_proj"):
                continue
            count, first = 0, "down_proj" if kind == "down_proj" else "gate_proj"
            while f"{prefix}.{count}.{first}.weight" in state:
                count += 1
            if kind == "down_proj":
                state[name] = torch.stack([state.pop(f"{prefix}.{e}.down_proj.weight") for e in range(count)])
            else:
                pairs = [
                    (state.pop(f"{prefix}.{e}.gate_proj.weight"), state.pop(f"{prefix}.{e}.up_proj.weight"))
                    for e in range(count)
                ]
                state[name] = torch.stack([torch.cat(pair) for pair in pairs])
        return state

    def merge_and_save(self) -> None:
        """``merge``: write the HF model and tokenizer to target_dir; ``test``: compare with ``test_hf_dir``."""
        state_dict = self._in_memory_names(self.cast(self.load_merged_state_dict()))
        if self.config.operation == "test":
            self.test_state_dict(state_dict)
            return
        self.save_hf_model_and_tokenizer(state_dict)
        if self.config.hf_upload:
            self.upload_to_huggingface()
        logger.info("merged %s into %s", self.config.local_dir, self.config.target_dir)
