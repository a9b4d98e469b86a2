"""Checkpoints of the Megatron engine: every rank its own shard (``*_world_size_{W}_rank_{r}.pt``), as the FSDP
engine's manager writes them, plus ``megatron_config.json`` (the parallel sizes the shards need to be read back) and
``huggingface/`` (config and tokenizer; with ``hf_model`` in ``save_contents`` also the full weights in HF's layout,
gathered by the hand-off stream, which transformers loads directly).

What to save and load (``checkpoint.save_contents`` / ``load_contents``), the rotation of old folders and the RNG
states are the base manager's. Megatron's distributed-checkpoint layout (``use_dist_checkpointing``) is not written
here; the config check refuses it.
"""

from __future__ import annotations

import json
import os

import torch
import torch.distributed as dist

from verl.utils.checkpoint.checkpoint_manager import BaseCheckpointManager

__all__ = ["MegatronCheckpointManager"]


class MegatronCheckpointManager(BaseCheckpointManager):
    """Save and load a :class:`~verl.workers.engine.megatron.engine.MegatronEngine`'s model, optimizer, LR schedule
    and RNG states (collective over all ranks)."""

    def __init__(self, engine, checkpoint_config=None):
        super().__init__(
            engine.module, engine.optimizer, engine.lr_scheduler, engine.processing_class, checkpoint_config
        )
        self.engine = engine

    def _file(self, local_path: str, what: str) -> str:
        return os.path.join(local_path, f"{what}_world_size_{self.world_size}_rank_{self.rank}.pt")

    def _parallel_sizes(self) -> dict:
        from megatron.core import parallel_state

        return {
            "world_size": self.world_size,
            "tensor_model_parallel_size": parallel_state.get_tensor_model_parallel_world_size(),
            "pipeline_model_parallel_size": parallel_state.get_pipeline_model_parallel_world_size(),
            # model chunks per stage: the model files then hold a ModelChunks' state dict ("<chunk>.<GPTModel key>")
            "virtual_pipeline_model_parallel_size": parallel_state.get_virtual_pipeline_model_parallel_world_size(),
            "expert_model_parallel_size": parallel_state.get_expert_model_parallel_world_size(),
            # the optimizer files hold per-parameter state, or (distributed optimizer) one data-parallel slice's
            "use_distributed_optimizer": self.engine.sharded_params is not None,
        }

    @staticmethod
    def _coordinates() -> dict:
        from megatron.core import parallel_state

        return {
            "tp_rank": parallel_state.get_tensor_model_parallel_rank(),
            "pp_rank": parallel_state.get_pipeline_model_parallel_rank(),
            "dp_rank": parallel_state.get_data_parallel_rank(),
            # expert parallelism: which experts the file holds, and which replica of them
            "ep_rank": parallel_state.get_expert_model_parallel_rank(),
            "edp_rank": parallel_state.get_expert_data_parallel_rank(),
        }

    def save_checkpoint(self, local_path, hdfs_path=None, global_step: int = 0, max_ckpt_to_keep=None):
        if local_path is None:
            return
        self.previous_global_step = global_step
        self._rotate(max_ckpt_to_keep)
        os.makedirs(local_path, exist_ok=True)
        dist.barrier()
        if self.should_save_model:
            torch.save(self.model.state_dict(), self._file(local_path, "model"))
        if self.should_save_optimizer:
            torch.save(self.optimizer.state_dict(), self._file(local_path, "optim"))
        if self.should_save_extra:
            scheduler = self.lr_scheduler.state_dict() if self.lr_scheduler is not None else None
            torch.save({"lr_scheduler": scheduler, "rng": self.get_rng_state()}, self._file(local_path, "extra_state"))
        hf_dir = os.path.join(local_path, "huggingface")
        coordinates = [None] * self.world_size  # which shard each rank's files hold, for the model merger
        dist.all_gather_object(coordinates, self._coordinates())
        if self.rank == 0:
            with open(os.path.join(local_path, "megatron_config.json"), "w") as f:
                json.dump({**self._parallel_sizes(), "ranks": coordinates}, f)
            self.engine.hf_config.save_pretrained(hf_dir)
            if self.processing_class is not None:
                self.processing_class.save_pretrained(hf_dir)
        if self.should_save_hf_model:
            self._save_hf_weights(hf_dir)
        dist.barrier()
        if hdfs_path is not None and self.rank == 0:
            from verl.utils import hdfs_io

            hdfs_io.makedirs(hdfs_path, exist_ok=True)
            hdfs_io.copy(src=local_path, dst=hdfs_path)
        self.previous_saved_paths.append(local_path)

    def _save_hf_weights(self, hf_dir: str) -> None:
        """Rank 0 writes the full weights as ``model.safetensors`` (every rank takes part in the gather)."""
        state = {}
        for name, tensor in self.engine.hf_weights():
            if self.rank == 0:
                state[name] = tensor.contiguous()
        if self.rank == 0:
            from safetensors.torch import save_file

            save_file(state, os.path.join(hf_dir, "model.safetensors"), metadata={"format": "pt"})

    def load_checkpoint(self, local_path, hdfs_path=None, del_local_after_load: bool = False):
        if local_path is None:
            return
        with open(os.path.join(local_path, "megatron_config.json")) as f:
            saved = json.load(f)
        saved.pop("ranks", None)
        saved.setdefault("use_distributed_optimizer", False)  # written before the distributed optimizer existed
        saved.setdefault("virtual_pipeline_model_parallel_size", None)  # written before virtual pipeline stages
        saved.setdefault("expert_model_parallel_size", 1)  # written before expert parallelism
        if saved != self._parallel_sizes():
            raise ValueError(
                f"the checkpoint in {local_path} was saved with {saved}; this run has {self._parallel_sizes()}: "
                "resume with the same number of workers and megatron parallel sizes"
            )
        if self.should_load_model:
            self.model.load_state_dict(torch.load(self._file(local_path, "model"), weights_only=False))
        if self.should_load_optimizer and self.optimizer is not None:
            self.optimizer.load_state_dict(torch.load(self._file(local_path, "optim"), weights_only=False))
        if self.should_load_extra:
            extra = torch.load(self._file(local_path, "extra_state"), weights_only=False)
            self.load_rng_state(extra["rng"])
            if self.lr_scheduler is not None and extra.get("lr_scheduler") is not None:
                self.lr_scheduler.load_state_dict(extra["lr_scheduler"])
        dist.barrier()
