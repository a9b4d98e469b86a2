"""The PRIME reward-model worker: a trainable implicit PRM (a causal LM) and its frozen reference, under FSDP.

Built with the project's single model builder (``verl.workers.engine.fsdp.setup``: ``load_pretrained`` /
``build_fsdp_model``); its methods are dispatched with ``@register`` like the other workers'. ``config`` is the
``reward_model`` section.
"""

from __future__ import annotations

import copy
import time

import torch.distributed as dist
from omegaconf import DictConfig

from recipe.prime.prime_config import PrimeRewardModelSettings
from verl import DataProto
from verl.single_controller.base import Worker
from verl.single_controller.base.decorator import Dispatch, register
from verl.trainer.config import ActorConfig, RefConfig, RewardModelConfig
from verl.utils.config import omega_conf_to_dataclass
from verl.utils.debug import DistProfiler, DistProfilerExtension
from verl.utils.distributed import init_distributed
from verl.utils.import_utils import import_external_libs
from verl.workers.config.batch_sizes import normalize_reward_model_micro_batch_size
from verl.workers.engine.fsdp.activation_checkpointing import ActivationCheckpointing
from verl.workers.engine.fsdp.offload import OffloadGuard
from verl.workers.engine.fsdp.setup import (
    build_fsdp_model,
    build_optimizer,
    create_device_mesh,
)
from verl.workers.engine.pretrained import load_pretrained

__all__ = ["PRIMERewardModelWorker"]


class PRIMERewardModelWorker(Worker, DistProfilerExtension):
    """One process of the implicit PRM: ``compute_rm_score``, ``update_rm``, ``save_checkpoint``,
    ``load_checkpoint``."""

    def __init__(self, config: RewardModelConfig | DictConfig):
        Worker.__init__(self)
        # a private copy: the in-process group shares the trainer's objects
        self.config = config = copy.deepcopy(omega_conf_to_dataclass(config, RewardModelConfig, allow_extra=True))
        self.settings = PrimeRewardModelSettings.from_config(config)
        init_distributed()
        world_size = dist.get_world_size()
        fsdp_config = config.model.fsdp_config
        self.device_mesh = create_device_mesh(world_size, fsdp_config.fsdp_size)
        self.micro_batch_size = normalize_reward_model_micro_batch_size(config, world_size)
        self.offload = OffloadGuard(fsdp_config.param_offload, fsdp_config.optimizer_offload)
        DistProfilerExtension.__init__(self, DistProfiler(rank=self.rank, config=config.profiler))
        self.checkpoint_manager = None

    def _model_option(self, key: str, default):
        return self.config.model.extra.get(key, default)

    @register(dispatch_mode=Dispatch.ONE_TO_ALL)
    def init_model(self):
        """Load the PRM (trainable, with AdamW and its schedule) and the reference (frozen, offloaded)."""
        from transformers import AutoModelForCausalLM

        from recipe.prime.prime_dp_rm import DataParallelPRIMERewardModel
        from verl.workers.actor import DataParallelPPOActor

        model_cfg = self.config.model
        import_external_libs(model_cfg.external_lib)
        trust = model_cfg.trust_remote_code
        tokenizer_path = self._model_option("tokenizer_path", None)

        # the PRM trains through an actor built over its module, which does not plan per micro batch: full recompute
        checkpointing = None
        if self._model_option("enable_gradient_checkpointing", False):
            checkpointing = ActivationCheckpointing("full")

        def load(path: str, trainable: bool):
            files = load_pretrained(
                path, use_shm=model_cfg.use_shm, trust_remote_code=trust, tokenizer_path=tokenizer_path
            )
            module = build_fsdp_model(
                AutoModelForCausalLM,
                files,
                strategy=self.config.strategy,
                fsdp_config=model_cfg.fsdp_config,
                device_mesh=self.device_mesh,
                trainable=trainable,
                trust_remote_code=trust,
                gradient_checkpointing=checkpointing if trainable else None,
                cpu_offload=None if trainable else True,
            )
            return files, module

        files, self.reward_module = load(self.settings.path, trainable=True)
        self.tokenizer = files.tokenizer
        _, ref_module = load(self.settings.ref_path, trainable=False)
        self.optimizer, self.lr_scheduler = build_optimizer(self.reward_module, self.settings.optim)
        remove_padding = model_cfg.use_remove_padding
        rm_actor = DataParallelPPOActor(
            ActorConfig(use_remove_padding=remove_padding, grad_clip=self.settings.grad_clip),
            self.reward_module,
            self.optimizer,
        )
        ref_actor = DataParallelPPOActor(RefConfig(use_remove_padding=remove_padding), ref_module)
        self.rm = DataParallelPRIMERewardModel(
            self.settings,
            rm_actor,
            ref_actor,
            self.optimizer,
            self.micro_batch_size,
            use_dynamic_bsz=self.config.use_dynamic_bsz,
            max_token_len=self.config.forward_max_token_len_per_gpu,
        )
        self.offload.attach(self.reward_module, self.optimizer)

    def _output(self, rm_scores, token_q, start: float, metrics: dict | None = None) -> DataProto:
        meta = {"timing": {}}
        if metrics is not None:
            meta["metrics"] = metrics
        out = DataProto.from_dict({"rm_scores": rm_scores, "q": token_q}, meta_info=meta).to("cpu")
        out.meta_info["timing"] = {"worker/rm": time.perf_counter() - start}
        return out

    @register(dispatch_mode=Dispatch.DP_COMPUTE_PROTO)
    def compute_rm_score(self, data: DataProto) -> DataProto:
        """``rm_scores`` (implicit process rewards) and ``q`` (log-ratios), each ``(bs, response_length)``."""
        start = time.perf_counter()
        with self.offload.resident():
            rm_scores, token_q = self.rm.compute_rm_score(data.to("cpu"))
        return self._output(rm_scores, token_q, start)

    @register(dispatch_mode=Dispatch.DP_COMPUTE_PROTO)
    def update_rm(self, data: DataProto) -> DataProto:
        """One update of the PRM on ``data`` (needs ``acc``; ``Q_bc``/``acc_bc`` for the DPO loss); returns the
        training forward's ``rm_scores`` and ``q`` and ``meta_info["metrics"]``.

        meta_info ``rollout_n``: responses per prompt, so ``reward_model.mini_batch_size`` (prompts) becomes rows.
        """
        start = time.perf_counter()
        n = int(data.meta_info.get("rollout_n", 1))
        rows = max(1, self.settings.mini_batch_size * n // self.world_size)
        with self.offload.resident(with_optimizer=True):
            rm_scores, token_q, metrics = self.rm.update_rm(data.to("cpu"), rows)
            metrics["reward_model/lr"] = self.lr_scheduler.get_last_lr()[0]
            self.lr_scheduler.step()
        return self._output(rm_scores, token_q, start, metrics)

    def _checkpointer(self):
        if self.checkpoint_manager is None:
            from verl.utils.checkpoint.fsdp_checkpoint_manager import FSDPCheckpointManager

            checkpoint_config = self.config.extra.get("checkpoint") or {}
            self.checkpoint_manager = FSDPCheckpointManager(
                model=self.reward_module,
                optimizer=self.optimizer,
                lr_scheduler=self.lr_scheduler,
                processing_class=self.tokenizer,
                checkpoint_config=checkpoint_config or None,
            )
        return self.checkpoint_manager

    @register(dispatch_mode=Dispatch.ONE_TO_ALL)
    def save_checkpoint(self, local_path, hdfs_path=None, global_step=0, max_ckpt_to_keep=None):
        """Save this rank's shard of the PRM, its optimizer and schedule (the reference is frozen: not saved)."""
        with self.offload.resident(with_optimizer=True):
            self._checkpointer().save_checkpoint(
                local_path=local_path, hdfs_path=hdfs_path, global_step=global_step, max_ckpt_to_keep=max_ckpt_to_keep
            )
        dist.barrier()

    @register(dispatch_mode=Dispatch.ONE_TO_ALL)
    def load_checkpoint(self, local_path, hdfs_path=None, del_local_after_load=False):
        """Restore this rank's shard saved by :meth:`save_checkpoint`."""
        with self.offload.resident(with_optimizer=True):
            self._checkpointer().load_checkpoint(
                local_path=local_path, hdfs_path=hdfs_path, del_local_after_load=del_local_after_load
            )
        self.offload.offload_optimizer_state()
