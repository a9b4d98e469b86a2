"""Checkpoints of the Megatron engine in megatron-core's distributed-checkpoint layout (``torch_dist`` format).

A checkpoint folder (``global_step_N/actor``) holds:

- ``dist_ckpt/``: one ``megatron.core.dist_checkpointing`` checkpoint of the model (the keys of
  ``GPTModel.sharded_state_dict()``, each tensor stored once in its global, unsharded shape) and of the optimizer
  (AdamW's ``exp_avg`` / ``exp_avg_sq`` of each parameter under ``optimizer.state.<name>.<parameter key>``, sharded
  like the parameter; its step count, hyper-parameters and the LR schedule as common state). With the distributed
  optimizer the data-parallel slices are gathered per parameter first, so both optimizers write the same layout;
- ``extra_state_world_size_{W}_rank_{r}.pt``: this rank's RNG states;
- ``megatron_config.json``: the parallel sizes and the model kind it was saved with;
- ``huggingface/``: config and tokenizer, with ``hf_model`` in ``save_contents`` also the full weights in HF's layout.

Because every tensor is stored in its global shape, a checkpoint loads at other tensor / pipeline / data-parallel
sizes than it was saved with (megatron-core reshards on load; the vocabulary padding, which depends on the tensor-
parallel size, is cut or extended by its ``allow_shape_mismatch``). Only the RNG states are per rank: they are
restored where the world size matches. The model merger reads ``dist_ckpt/`` without megatron-core or a process
group (:func:`read_model_tensors`).

What to save and load (``checkpoint.save_contents`` / ``load_contents``) and the rotation of old folders are the base
manager's.
"""

from __future__ import annotations

import json
import logging
import os
import shutil

import torch
import torch.distributed as dist

from verl.utils.checkpoint.checkpoint_manager import BaseCheckpointManager

logger = logging.getLogger(__name__)

__all__ = [
    "DIST_CKPT_DIR",
    "MegatronCheckpointManager",
    "load_model_from_dist_checkpoint",
    "model_sharded_state_dict",
    "read_model_tensors",
]

DIST_CKPT_DIR = "dist_ckpt"
_OPTIMIZER_PREFIX = "optimizer.state"
_ADAM_STATES = ("exp_avg", "exp_avg_sq")


def _sharded_entries(model, model_sharded: dict) -> list[tuple[str, object]]:
    """``(name, ShardedTensor / ShardedTensorFactory)`` of each trainable parameter of ``model`` (in parameter order)
    in its sharded state dict, whose keys are the parameters' names (the entries hold copies, not the parameters; the
    entries' own keys are shared by the layers of a stack)."""
    return [(name, model_sharded[name]) for name, p in model.named_parameters() if p.requires_grad]


def model_sharded_state_dict(model) -> dict:
    """``model``'s megatron-core sharded state dict: one ``GPTModel``'s, or under virtual pipeline parallelism (a
    :class:`~verl.workers.engine.megatron.model.ModelChunks`) every chunk's under ``"<chunk>.<key>"`` (the names of
    the chunks' ``state_dict``). Each chunk's layers are stored at their global layer numbers and each expert at its
    global index (megatron-core's sharded offsets), so the stored tensors do not depend on the chunk or expert-
    parallel layout."""
    from verl.workers.engine.megatron.model import ModelChunks

    if not isinstance(model, ModelChunks):
        return model.sharded_state_dict()
    return {f"{c}.{key}": value for c, chunk in enumerate(model) for key, value in chunk.sharded_state_dict().items()}


def load_model_from_dist_checkpoint(model, path: str) -> None:
    """Load ``model``'s weights (this rank's shards) from the megatron-core distributed checkpoint at ``path`` (a
    ``dist_ckpt`` folder this manager wrote, or any checkpoint of ``GPTModel.sharded_state_dict()``'s keys), at any
    parallel sizes. Collective over all ranks."""
    from megatron.core import dist_checkpointing

    from verl.workers.engine.megatron.cpu_shims import cpu_current_device

    with cpu_current_device():
        loaded = dist_checkpointing.load({"model": model_sharded_state_dict(model)}, path)
    model.load_state_dict(loaded["model"])


class MegatronCheckpointManager(BaseCheckpointManager):
    """Save and load a :class:`~verl.workers.engine.megatron.engine.MegatronEngine`'s model, optimizer, LR schedule
    and RNG states (collective over all ranks)."""

    def __init__(self, engine, checkpoint_config=None):
        super().__init__(
            engine.module, engine.optimizer, engine.lr_scheduler, engine.processing_class, checkpoint_config
        )
        self.engine = engine

    def _extra_file(self, local_path: str) -> str:
        return os.path.join(local_path, f"extra_state_world_size_{self.world_size}_rank_{self.rank}.pt")

    def _parallel_sizes(self) -> dict:
        from megatron.core import parallel_state

        return {
            "format": "megatron_dist_checkpoint",
            "world_size": self.world_size,
            "tensor_model_parallel_size": parallel_state.get_tensor_model_parallel_world_size(),
            "pipeline_model_parallel_size": parallel_state.get_pipeline_model_parallel_world_size(),
            # model chunks per stage (virtual pipeline) and expert-parallel size: informative only, the stored
            # tensors carry global layer and expert indices
            "virtual_pipeline_model_parallel_size": parallel_state.get_virtual_pipeline_model_parallel_world_size(),
            "expert_model_parallel_size": parallel_state.get_expert_model_parallel_world_size(),
            "use_distributed_optimizer": self.engine.sharded_params is not None,
            "kind": self.engine.kind,
        }

    # ------------------------------------------------------------------------------------------ optimizer state
    def _trainable(self) -> list[torch.nn.Parameter]:
        return [p for p in self.model.parameters() if p.requires_grad]  # the order of _sharded_entries

    def _optimizer_params(self) -> list[torch.nn.Parameter]:
        return [p for group in self.optimizer.param_groups for p in group["params"]]

    def _adam_state_per_param(self) -> dict[str, list[torch.Tensor]] | None:
        """AdamW's moments as one full tensor per model parameter (``_ADAM_STATES`` -> list in parameter order), or
        None before the first step. With the distributed optimizer the slices are all-gathered over data parallel."""
        sharded = self.engine.sharded_params
        if sharded is None:
            states = [self.optimizer.state.get(p, {}) for p in self._trainable()]
            if not states or any(not s for s in states):
                return None
            return {name: [s[name] for s in states] for name in _ADAM_STATES}
        state = self.optimizer.state.get(sharded.master, {})
        have = torch.tensor([float(bool(state))])
        if sharded.dp_size > 1:  # every replica steps together; the check keeps the collective below matched
            dist.all_reduce(have, op=dist.ReduceOp.MIN, group=sharded.dp_group)
        if not have.item():
            return None
        result = {}
        for name in _ADAM_STATES:
            flat = state[name].detach().contiguous()
            if sharded.dp_size > 1:
                slices = [torch.empty_like(flat) for _ in range(sharded.dp_size)]
                dist.all_gather(slices, flat, group=sharded.dp_group)
                flat = torch.cat(slices)
            tensors, offset = [], 0
            for p, n in zip(sharded.params, sharded.numels):
                tensors.append(flat[offset : offset + n].view_as(p))
                offset += n
            result[name] = tensors
        return result

    def _optimizer_common(self) -> dict:
        """The optimizer's step count and hyper-parameters (the same on every rank)."""
        groups = [{k: v for k, v in g.items() if k != "params"} for g in self.optimizer.param_groups]
        params = self._optimizer_params()
        step = self.optimizer.state.get(params[0], {}).get("step") if params else None
        return {"step": None if step is None else float(step), "param_groups": groups}

    def _optimizer_sharded(self, model_sharded: dict, states: dict[str, list[torch.Tensor]]) -> dict:
        """The moments as sharded tensors shaped and placed like their parameters."""
        from megatron.core.dist_checkpointing.optimizer import make_sharded_optimizer_tensor

        entries = _sharded_entries(self.model, model_sharded)
        result = {}
        for name, tensors in states.items():
            for (param_name, entry), tensor in zip(entries, tensors):
                result[f"{name}.{param_name}"] = make_sharded_optimizer_tensor(
                    entry, tensor, f"{_OPTIMIZER_PREFIX}.{name}"
                )
        return result

    def _restore_optimizer(self, common: dict, states: dict[str, list[torch.Tensor]] | None) -> None:
        saved_groups = common["param_groups"]
        if len(saved_groups) != len(self.optimizer.param_groups):
            raise ValueError(
                f"the checkpoint's optimizer has {len(saved_groups)} parameter groups, this one "
                f"{len(self.optimizer.param_groups)}: resume with the same optim settings"
            )
        for group, saved in zip(self.optimizer.param_groups, saved_groups):
            group.update(saved)
        if states is None or common["step"] is None:
            self.optimizer.state.clear()
            return
        step = torch.tensor(common["step"], dtype=torch.float32)
        sharded = self.engine.sharded_params
        if sharded is None:
            for i, p in enumerate(self._trainable()):
                self.optimizer.state[p] = {"step": step.clone(), **{n: states[n][i].clone() for n in _ADAM_STATES}}
        else:
            slices = {n: sharded._slice(sharded._flat(states[n])).clone() for n in _ADAM_STATES}
            self.optimizer.state[sharded.master] = {"step": step, **slices}

    # ------------------------------------------------------------------------------------------ save / load
    def save_checkpoint(self, local_path, hdfs_path=None, global_step: int = 0, max_ckpt_to_keep=None):
        from megatron.core import dist_checkpointing

        from verl.workers.engine.megatron.cpu_shims import cpu_current_device, in_process_checkpoint_writes

        if local_path is None:
            return
        self.previous_global_step = global_step
        self._rotate(max_ckpt_to_keep)
        dist_dir = os.path.join(local_path, DIST_CKPT_DIR)
        if self.rank == 0:
            shutil.rmtree(dist_dir, ignore_errors=True)  # megatron-core writes into an empty folder only
            os.makedirs(dist_dir)
        dist.barrier()
        model_sharded = model_sharded_state_dict(self.model)
        state: dict = {}
        if self.should_save_model:
            state["model"] = model_sharded
        if self.should_save_optimizer and self.optimizer is not None:
            moments = self._adam_state_per_param()
            state["optimizer"] = {"common": self._optimizer_common(), "has_state": moments is not None}
            if moments is not None:
                state["optimizer"]["state"] = self._optimizer_sharded(model_sharded, moments)
        if self.should_save_extra and self.lr_scheduler is not None:
            state["lr_scheduler"] = self.lr_scheduler.state_dict()
        with cpu_current_device(), in_process_checkpoint_writes():
            dist_checkpointing.save(state, dist_dir)
        if self.should_save_extra:
            torch.save({"rng": self.get_rng_state()}, self._extra_file(local_path))
        hf_dir = os.path.join(local_path, "huggingface")
        if self.rank == 0:
            with open(os.path.join(local_path, "megatron_config.json"), "w") as f:
                json.dump(self._parallel_sizes(), f)
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
        from megatron.core import dist_checkpointing

        from verl.workers.engine.megatron.cpu_shims import cpu_current_device

        if local_path is None:
            return
        dist_dir = os.path.join(local_path, DIST_CKPT_DIR)
        if not os.path.isdir(dist_dir):
            raise FileNotFoundError(
                f"no {DIST_CKPT_DIR}/ in {local_path}: not a checkpoint of the Megatron engine's distributed layout "
                "(per-rank model_world_size_*.pt files are an older layout; resume them with the version that wrote "
                "them)"
            )
        common = dist_checkpointing.load_common_state_dict(dist_dir)
        model_sharded = model_sharded_state_dict(self.model)
        keys = [name for name, _ in _sharded_entries(self.model, model_sharded)]
        request: dict = {}
        if self.should_load_model:
            request["model"] = model_sharded
        load_optimizer = self.should_load_optimizer and self.optimizer is not None and "optimizer" in common
        if load_optimizer and common["optimizer"]["has_state"]:
            # the targets: one full-shaped tensor per parameter, placed as the parameter is
            empty = {n: [torch.zeros_like(p) for p in self._trainable()] for n in _ADAM_STATES}
            request["optimizer"] = {"state": self._optimizer_sharded(model_sharded, empty)}
        with cpu_current_device():
            loaded = dist_checkpointing.load(request, dist_dir) if request else {}
        if self.should_load_model:
            self.model.load_state_dict(loaded["model"])
        if load_optimizer:
            states = None
            if common["optimizer"]["has_state"]:
                states = {n: [loaded["optimizer"]["state"][f"{n}.{key}"] for key in keys] for n in _ADAM_STATES}
            self._restore_optimizer(common["optimizer"]["common"], states)
        if self.should_load_extra:
            if self.lr_scheduler is not None and common.get("lr_scheduler") is not None:
                self.lr_scheduler.load_state_dict(common["lr_scheduler"])
            extra_file = self._extra_file(local_path)
            if os.path.isfile(extra_file):
                self.load_rng_state(torch.load(extra_file, weights_only=False)["rng"])
            else:
                logger.warning("%s is missing (saved at another world size): RNG states not restored", extra_file)
        dist.barrier()


# the local layer spec's norms are stored under TransformerEngine's names (megatron-core maps them on save)
_STORED_NORM_NAMES = {
    "self_attention.linear_qkv.layer_norm_weight": "input_layernorm.weight",
    "mlp.linear_fc1.layer_norm_weight": "pre_mlp_layernorm.weight",
}


# a mixture of experts' SequentialMLP stores expert e of every layer under one key ("<its prefix>experts.<linear>"), at
# global expert index e
_STORED_EXPERTS = "mlp.experts.experts."


def read_model_tensors(dist_dir: str) -> dict[str, torch.Tensor]:
    """The model of a ``dist_ckpt`` folder as one unsharded ``GPTModel.state_dict()`` (tensor and pipeline parallel
    1: global layer numbers, experts as ``mlp.experts.local_experts.<global index>``; the vocabulary as padded when
    saved), read with torch's distributed-checkpoint reader in this process alone (no process group, no
    megatron-core): the model merger's path."""
    import torch.distributed.checkpoint as dcp

    reader = dcp.FileSystemReader(dist_dir)
    metadata = reader.read_metadata()
    tensors = {
        key: torch.empty(meta.size, dtype=meta.properties.dtype)
        for key, meta in metadata.state_dict_metadata.items()
        if hasattr(meta, "size") and not key.startswith(_OPTIMIZER_PREFIX)
    }
    dcp.load(tensors, storage_reader=reader, no_dist=True)
    state = {}
    for key, tensor in tensors.items():
        if not key.startswith("decoder.layers."):
            state[key] = tensor
            continue
        rest = key[len("decoder.layers.") :]  # stored stacked over layers: (num_layers, ...)
        rest = _STORED_NORM_NAMES.get(rest, rest)
        for layer, value in enumerate(tensor):
            if rest.startswith(_STORED_EXPERTS):  # and over experts: (num_layers, num_experts, ...)
                tail = rest[len(_STORED_EXPERTS) :]
                for expert, expert_value in enumerate(value):
                    state[f"decoder.layers.{layer}.mlp.experts.local_experts.{expert}.{tail}"] = expert_value
            else:
                state[f"decoder.layers.{layer}.{rest}"] = value
    return state
