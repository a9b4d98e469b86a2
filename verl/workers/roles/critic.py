"""The critic worker: one process of the value model, wired to the training engine ``critic.strategy`` names; the
value update is :class:`verl.workers.critic.PPOCritic` over it."""

from __future__ import annotations

import time

import torch
import torch.distributed as dist
from omegaconf import DictConfig

from verl import DataProto
from verl.single_controller.base import Worker
from verl.single_controller.base.decorator import Dispatch, register
from verl.utils.debug import DistProfilerExtension
from verl.utils.distributed import init_distributed
from verl.utils.import_utils import import_external_libs
from verl.workers.config import CriticConfig
from verl.workers.config.batch_sizes import normalize_critic_batch_sizes
from verl.workers.engine import get_engine_cls
from verl.workers.engine.pretrained import load_pretrained
from verl.workers.roles.base import mfu_metric, role_profiler, typed_section
from verl.workers.roles.phases import compute_phase, reports_compute_time

__all__ = ["CriticWorker"]


class CriticWorker(Worker, DistProfilerExtension):
    """One process of the value model (``critic`` section)."""

    def __init__(self, config: CriticConfig | DictConfig):
        Worker.__init__(self)
        self.config = config = typed_section(config, CriticConfig)
        init_distributed()
        normalize_critic_batch_sizes(config, dist.get_world_size()).apply_to(config)
        DistProfilerExtension.__init__(self, role_profiler(self, config.profiler, role="critic"))
        self.engine = self.critic = None

    @property
    def critic_module(self) -> torch.nn.Module:
        """The value model."""
        return self.engine.module

    @register(dispatch_mode=Dispatch.ONE_TO_ALL)
    def init_model(self):
        """Load the value model (token classification, one label) with its optimizer."""
        from verl.utils.flops_counter import FlopsCounter
        from verl.workers.critic import PPOCritic

        model_cfg = self.config.model
        import_external_libs(model_cfg.external_lib)
        files = load_pretrained(
            model_cfg.path,
            use_shm=model_cfg.use_shm,
            trust_remote_code=model_cfg.trust_remote_code,
            tokenizer_path=model_cfg.tokenizer_path,
            hf_config_path=model_cfg.hf_config_path,
            override_config=model_cfg.override_config,
            num_labels=1,
        )
        self.tokenizer = files.tokenizer
        # dropout makes value targets noisy and runs irreproducible; set classifier_dropout even where the config
        # has no such key, since HF's token-classification head then falls back to a dropout of 0.1
        files.hf_config.classifier_dropout = 0.0
        for key in ("hidden_dropout", "summary_dropout_prob", "attention_dropout"):
            if hasattr(files.hf_config, key):
                setattr(files.hf_config, key, 0.0)
        self.engine = get_engine_cls(self.config.strategy, "critic.strategy").build("critic", self.config, files)
        self.critic = PPOCritic(self.config, self.engine)
        self.flops_counter = FlopsCounter(files.hf_config)

    @register(dispatch_mode=Dispatch.DP_COMPUTE_PROTO)
    @compute_phase
    @reports_compute_time
    def compute_values(self, data: DataProto) -> DataProto:
        """``values`` ``(bs, response_length)`` for the responses in ``data``."""
        data.meta_info["micro_batch_size"] = self.config.forward_micro_batch_size_per_gpu
        data.meta_info["max_token_len"] = self.config.forward_max_token_len_per_gpu
        data.meta_info["use_dynamic_bsz"] = self.config.use_dynamic_bsz
        with self.engine.resident():
            values = self.critic.compute_values(data=data)
        return DataProto.from_dict({"values": values}).to("cpu")

    @register(dispatch_mode=Dispatch.DP_COMPUTE_PROTO)
    @compute_phase
    @reports_compute_time
    def update_critic(self, data: DataProto) -> DataProto:
        """One value-function update; returns ``meta_info["metrics"]``."""
        data = data.to("cpu")
        with self.engine.resident(with_optimizer=True):
            start = time.perf_counter()
            metrics = self.critic.update_critic(data=data)
            elapsed = time.perf_counter() - start
            self.engine.lr_scheduler_step()
            metrics["critic/lr"] = self.engine.lr()
            metrics["perf/mfu/critic"] = (
                mfu_metric(self.flops_counter, data.meta_info.get("global_token_num", []), elapsed, self.world_size)
                * self.config.ppo_epochs
            )
        return DataProto(batch=None, meta_info={"metrics": metrics})

    @register(dispatch_mode=Dispatch.ONE_TO_ALL)
    def save_checkpoint(self, local_path, hdfs_path=None, global_step=0, max_ckpt_to_keep=None):
        """Save this rank's shard of the value model, optimizer and extra state under ``local_path``."""
        self.engine.save_checkpoint(
            local_path=local_path, hdfs_path=hdfs_path, global_step=global_step, max_ckpt_to_keep=max_ckpt_to_keep
        )

    @register(dispatch_mode=Dispatch.ONE_TO_ALL)
    def load_checkpoint(self, local_path, hdfs_path=None, del_local_after_load=True):
        """Restore this rank's shard saved by :meth:`save_checkpoint`."""
        self.engine.load_checkpoint(
            local_path=local_path, hdfs_path=hdfs_path, del_local_after_load=del_local_after_load
        )
