"""Save and restore FSDP1 / FSDP2 / plain-module training state in verl's per-rank checkpoint layout.

``local_path`` (e.g. ``global_step_N/actor``) receives, per rank ``r`` of ``W``:
``model_world_size_{W}_rank_{r}.pt`` (sharded model state dict: DTensor shards for FSDP2),
``optim_world_size_{W}_rank_{r}.pt`` (optimizer ``state_dict()``), ``extra_state_world_size_{W}_rank_{r}.pt``
(``{"lr_scheduler", "rng"}``); rank 0 adds ``fsdp_config.json``, ``huggingface/`` (config, generation config,
tokenizer/processor; full bf16 weights with ``hf_model``) and, for peft models, ``lora_adapter/``.
"""

from __future__ import annotations

import json
import logging
import os
import warnings
from dataclasses import asdict, dataclass

import torch
import torch.distributed as dist

from verl.utils.checkpoint.checkpoint_manager import BaseCheckpointManager
from verl.utils.checkpoint.lora import LORA_ADAPTER_DIR, lora_adapter_state_dict, merge_lora_state_dict
from verl.utils.checkpoint.lora import save_lora_adapter as _write_lora_adapter
from verl.utils.device import is_accelerator_available
from verl.utils.fs import copy_to_local, is_non_local, local_mkdir_safe
from verl.utils.fsdp_utils import _meta_parameters, fsdp_version, get_fsdp_full_state_dict, get_fsdp_state_ctx

logger = logging.getLogger(__name__)

__all__ = ["FSDPCheckpointManager", "FSDPConfig"]


@dataclass
class FSDPConfig:
    """Contents of ``fsdp_config.json``: the FSDP version (0 for a plain module) and the world size of the save."""

    FSDP_version: int
    world_size: int


def _barrier() -> None:
    if dist.is_available() and dist.is_initialized():
        dist.barrier()


def _atomic_torch_save(obj, path: str) -> None:
    """``torch.save`` to a temp name then rename: a killed write never leaves a truncated file under ``path``."""
    tmp = f"{path}.tmp"
    torch.save(obj, tmp)
    os.replace(tmp, path)


def _unwrap(model):
    """The module inside an FSDP1 wrapper (FSDP2 and plain modules are their own inner module)."""
    return getattr(model, "_fsdp_wrapped_module", model)


def _is_peft(module) -> bool:
    return hasattr(module, "peft_config") and hasattr(module, "get_base_model")


def _hf_model(module):
    """The transformers model (the base model of a peft wrapper)."""
    return module.get_base_model() if _is_peft(module) else module


def _auto_class_for(config):
    """The Auto class for ``config.architectures[0]``: token classification, vision-to-text or causal LM."""
    import transformers

    arch = (getattr(config, "architectures", None) or [""])[0]
    if arch.endswith("ForTokenClassification"):
        return transformers.AutoModelForTokenClassification
    if arch.endswith("ForConditionalGeneration"):
        cls = getattr(transformers, "AutoModelForImageTextToText", None) or transformers.AutoModelForVision2Seq
        return cls
    if arch.endswith("ForCausalLM") or arch == "":
        return transformers.AutoModelForCausalLM
    raise NotImplementedError(f"config.architectures[0]={arch!r}: no HF model class known for saving hf_model")


class FSDPCheckpointManager(BaseCheckpointManager):
    """Checkpoint an FSDP1/FSDP2-wrapped (or plain) model with its optimizer, LR scheduler and RNG states."""

    def __init__(
        self,
        model,
        optimizer=None,
        lr_scheduler=None,
        processing_class=None,
        checkpoint_config=None,
        **kwargs,
    ):
        if processing_class is None:
            assert "tokenizer" in kwargs, "FSDPCheckpointManager needs processing_class (or the deprecated tokenizer=)"
            warnings.warn("tokenizer= is deprecated; pass processing_class=", DeprecationWarning, stacklevel=2)
            processing_class = kwargs.pop("tokenizer")
        super().__init__(model, optimizer, lr_scheduler, processing_class, checkpoint_config)

    # --------------------------------------------------------------------------------------------------------
    def _file(self, folder: str, kind: str, world_size: int | None = None, rank: int | None = None) -> str:
        w = self.world_size if world_size is None else world_size
        r = self.rank if rank is None else rank
        return os.path.join(folder, f"{kind}_world_size_{w}_rank_{r}.pt")

    def _state_ctx(self):
        """FSDP1 needs SHARDED_STATE_DICT (offloaded to CPU on accelerators); FSDP2/plain state dicts are as is."""
        if fsdp_version(self.model) != 1:
            return get_fsdp_state_ctx(self.model, None, None, None)
        from torch.distributed.fsdp import ShardedOptimStateDictConfig, ShardedStateDictConfig, StateDictType

        offload = is_accelerator_available()
        return get_fsdp_state_ctx(
            self.model,
            StateDictType.SHARDED_STATE_DICT,
            ShardedStateDictConfig(offload_to_cpu=offload),
            ShardedOptimStateDictConfig(offload_to_cpu=offload),
        )

    # --------------------------------------------------------------------------------------------------------
    def load_checkpoint(self, local_path: str | None, hdfs_path: str | None = None, del_local_after_load=False):
        """Restore the parts in ``load_contents`` from this rank's files under ``local_path`` (a collective).

        The world size must equal the saved one: shard files are named by it.
        """
        if local_path is None:
            return
        wanted = [
            ("model", self.should_load_model),
            ("optim", self.should_load_optimizer),
            ("extra_state", self.should_load_extra),
        ]
        sources = {kind: self._file(local_path, kind) for kind, on in wanted if on}
        missing = [p for p in sources.values() if not is_non_local(p) and not os.path.exists(p)]
        if missing:
            saved = self._saved_world_size(local_path)
            hint = f" (it was saved with world_size={saved})" if saved not in (None, self.world_size) else ""
            raise FileNotFoundError(
                f"checkpoint {local_path!r} has no {missing} for rank {self.rank} of world_size={self.world_size}"
                f"{hint}; load_contents={self.checkpoint_load_contents}"
            )
        local = {kind: copy_to_local(src) for kind, src in sources.items()}
        states = {kind: torch.load(path, weights_only=False) for kind, path in local.items()}
        if del_local_after_load and self.rank == 0:
            for kind, src in sources.items():
                # Only copies of remote files are disposable; a local checkpoint is the user's data.
                if is_non_local(src) and os.path.exists(local[kind]):
                    os.remove(local[kind])
        with self._state_ctx():
            if "model" in states:
                assert self.model is not None, "load_contents has 'model' but the manager has no model"
                self.model.load_state_dict(states["model"])
            if "optim" in states:
                assert self.optimizer is not None, "load_contents has 'optimizer' but the manager has no optimizer"
                self.optimizer.load_state_dict(states["optim"])
        extra = states.get("extra_state")
        if extra is not None:
            if extra.get("rng") is not None:
                self.load_rng_state(extra["rng"])
            if self.lr_scheduler is not None and extra.get("lr_scheduler") is not None:
                self.lr_scheduler.load_state_dict(extra["lr_scheduler"])
        _barrier()

    @staticmethod
    def _saved_world_size(local_path: str) -> int | None:
        path = os.path.join(local_path, "fsdp_config.json")
        if not os.path.isfile(path):
            return None
        with open(path) as f:
            return json.load(f).get("world_size")

    # --------------------------------------------------------------------------------------------------------
    def save_checkpoint(
        self,
        local_path: str | None,
        hdfs_path: str | None = None,
        global_step: int = 0,
        max_ckpt_to_keep: int | None = None,
    ):
        """Write this rank's shards (and rank 0's shared files) into ``local_path``; a collective on all ranks."""
        if local_path is None:
            return
        self.previous_global_step = global_step
        self._rotate(max_ckpt_to_keep)
        local_path = local_mkdir_safe(local_path)
        _barrier()
        with self._state_ctx():
            if self.should_save_model:
                assert self.model is not None, "save_contents has 'model' but the manager has no model"
                _atomic_torch_save(self.model.state_dict(), self._file(local_path, "model"))
            if self.should_save_optimizer:
                assert self.optimizer is not None, "save_contents has 'optimizer' but the manager has no optimizer"
                _atomic_torch_save(self.optimizer.state_dict(), self._file(local_path, "optim"))
        if self.should_save_extra:
            extra = {
                "lr_scheduler": self.lr_scheduler.state_dict() if self.lr_scheduler is not None else None,
                "rng": self.get_rng_state(),
            }
            _atomic_torch_save(extra, self._file(local_path, "extra_state"))
        if self.rank == 0:
            self._save_shared_files(local_path)
        if _is_peft(_unwrap(self.model)) and (self.should_save_model or self.should_save_hf_model):
            self._save_lora_adapter(local_path)
        _barrier()
        if self.should_save_hf_model:
            self._save_hf_model(local_path)
            _barrier()
        if hdfs_path is not None and self.rank == 0:
            from verl.utils import hdfs_io

            hdfs_io.makedirs(hdfs_path, exist_ok=True)
            hdfs_io.copy(src=local_path, dst=hdfs_path)
        self.previous_saved_paths.append(local_path)

    def _save_shared_files(self, local_path: str) -> None:
        """Rank 0: ``fsdp_config.json`` and ``huggingface/`` (config, generation config, tokenizer/processor)."""
        with open(os.path.join(local_path, "fsdp_config.json"), "w") as f:
            json.dump(asdict(FSDPConfig(FSDP_version=fsdp_version(self.model), world_size=self.world_size)), f)
        hf_dir = os.path.join(local_path, "huggingface")
        os.makedirs(hf_dir, exist_ok=True)
        model = _hf_model(_unwrap(self.model)) if self.model is not None else None
        config = getattr(model, "config", None)
        if config is not None:
            config.save_pretrained(hf_dir)
            generation = self._generation_config(model, config)
            if generation is not None:
                generation.save_pretrained(hf_dir)
        if self.processing_class is not None:
            self.processing_class.save_pretrained(hf_dir)

    @staticmethod
    def _generation_config(model, config):
        """The generation config to ship: the original model dir's, else the model's own; None if it cannot generate."""
        can_generate = getattr(model, "can_generate", None)
        if not callable(can_generate) or not can_generate():
            return None
        name_or_path = getattr(config, "name_or_path", None) or getattr(config, "_name_or_path", None)
        if name_or_path:
            from transformers import GenerationConfig

            try:
                return GenerationConfig.from_pretrained(name_or_path)
            except (OSError, ValueError) as e:  # a model built from a config has no generation_config.json
                logger.info("no generation config at %s (%s); using the model's", name_or_path, e)
        return getattr(model, "generation_config", None)

    def _lora_state(self) -> dict:
        """Full LoRA tensors (a collective over the shard group); the gathered dict on rank 0, ``{}`` elsewhere."""
        from torch.distributed.tensor import DTensor

        out = {}
        for key, value in self.model.state_dict().items():
            if "lora_" not in key:
                continue
            full = value.full_tensor() if isinstance(value, DTensor) else value.detach()
            if self.rank == 0:
                out[key] = full.cpu()
        return out

    def _save_lora_adapter(self, local_path: str) -> None:
        """``lora_adapter/{adapter_model.safetensors, adapter_config.json}`` in peft's format (a collective)."""
        if fsdp_version(self.model) == 1:
            full = get_fsdp_full_state_dict(self.model, offload_to_cpu=True, rank0_only=True)
            state = {k: v for k, v in full.items() if "lora_" in k}
        else:
            state = self._lora_state()
        if self.rank != 0:
            return
        peft_module = _unwrap(self.model)
        adapter_name = getattr(peft_module, "active_adapter", "default")
        config = peft_module.peft_config[adapter_name].to_dict()
        _write_lora_adapter(
            lora_adapter_state_dict(state, adapter_name), config, os.path.join(local_path, LORA_ADAPTER_DIR)
        )

    def _save_hf_model(self, local_path: str) -> None:
        """Gather the full weights to rank 0 and ``save_pretrained`` them in bf16 into ``huggingface/``."""
        full = get_fsdp_full_state_dict(self.model, offload_to_cpu=True, rank0_only=True)
        if self.rank != 0:
            return
        peft_module = _unwrap(self.model)
        if _is_peft(peft_module):
            adapter_name = getattr(peft_module, "active_adapter", "default")
            full = merge_lora_state_dict(full, peft_module.peft_config[adapter_name].to_dict(), adapter_name)
        state = {k: v.to(torch.bfloat16) if v.is_floating_point() else v for k, v in full.items()}
        hf_model = hf_model_from_state_dict(_hf_model(peft_module).config, state)
        hf_model.save_pretrained(os.path.join(local_path, "huggingface"))


def hf_model_from_state_dict(config, state_dict: dict, auto_cls=None):
    """A transformers model of ``config`` holding exactly ``state_dict`` (built on meta, tensors assigned).

    ``auto_cls`` defaults to the class for ``config.architectures[0]``. Raises KeyError when a parameter is
    missing (tied output embeddings excepted) or the state dict has keys the model does not know.
    """
    auto_cls = auto_cls or _auto_class_for(config)
    dtypes = {v.dtype for v in state_dict.values() if v.is_floating_point()}
    # Parameters on meta (no random init of weights about to be replaced); buffers such as rotary inv_freq are
    # not in state dicts and must be computed for real.
    with _meta_parameters():
        model = auto_cls.from_config(config, dtype=dtypes.pop() if len(dtypes) == 1 else None)
    result = model.load_state_dict(state_dict, strict=False, assign=True)
    model.tie_weights()
    still_meta = [n for n, p in model.named_parameters() if p.is_meta]
    if still_meta or result.unexpected_keys:
        raise KeyError(
            f"state dict does not fit {type(model).__name__}: missing {still_meta[:8]}, "
            f"unexpected {list(result.unexpected_keys)[:8]}"
        )
    return model
