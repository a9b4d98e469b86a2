"""Merge a Megatron engine checkpoint (``global_step_N/actor``) into a Hugging Face model.

The checkpoint's ``dist_ckpt/`` is megatron-core's distributed-checkpoint layout, which stores every tensor in its
global (unsharded) shape whatever the parallel sizes were (layers at their global numbers, so a virtual pipeline's
model chunks need no reordering; experts at their global index, so expert-parallel ranks need no collecting): torch's
distributed-checkpoint reader loads it in this process alone
(:func:`verl.workers.engine.megatron.checkpoint.read_model_tensors`) and the converter renames it to HF
(:func:`verl.workers.engine.megatron.weights.merge_stage_shards` at tensor parallel 1: pure torch, no megatron-core,
process group or GPU needed).
"""

from __future__ import annotations

import json
import logging
import os

import torch

from verl.model_merger.base_model_merger import BaseModelMerger, ModelMergerConfig

logger = logging.getLogger(__name__)

__all__ = ["MegatronModelMerger"]


class MegatronModelMerger(BaseModelMerger):
    """``--backend megatron``: the engine's distributed checkpoint into one HF state dict."""

    def __init__(self, config: ModelMergerConfig):
        super().__init__(config)
        path = os.path.join(config.local_dir, "megatron_config.json")
        if not os.path.isfile(path):
            raise FileNotFoundError(
                f"no megatron_config.json in {config.local_dir!r}: --local_dir must be a Megatron engine checkpoint "
                "folder such as .../global_step_N/actor"
            )
        with open(path) as f:
            self.layout = json.load(f)  # the sizes it was saved at (the merge does not need them)

    def load_merged_state_dict(self) -> dict[str, torch.Tensor]:
        """The full HF-named state dict, from the checkpoint's ``dist_ckpt/`` (every tensor stored unsharded)."""
        from verl.workers.engine.megatron.checkpoint import DIST_CKPT_DIR, read_model_tensors
        from verl.workers.engine.megatron.weights import merge_stage_shards

        dist_dir = os.path.join(self.config.local_dir, DIST_CKPT_DIR)
        if not os.path.isdir(dist_dir):
            raise FileNotFoundError(
                f"no {DIST_CKPT_DIR}/ in {self.config.local_dir!r}: not a checkpoint of the Megatron engine's "
                "distributed layout (megatron_config.json says how it was saved)"
            )
        return merge_stage_shards([read_model_tensors(dist_dir)], self.model_config, layer_offset=0)

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
