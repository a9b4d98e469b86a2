"""FSDP workers: actor / rollout / reference policy, critic and reward model, each one process per device.

The trainer calls their ``@register``ed methods through worker groups; the heavy lifting lives in the engines
(``DataParallelPPOActor``, ``DataParallelPPOCritic``, the rollouts) and in ``fsdp_setup``.
"""

from __future__ import annotations

import logging
import time
from contextlib import contextmanager, nullcontext

import torch
import torch.distributed as dist
from omegaconf import DictConfig, open_dict

from verl import DataProto
from verl.single_controller.base import Worker
from verl.single_controller.base.decorator import Dispatch, register
from verl.utils.batch_sizes import (
    normalize_actor_batch_sizes,
    normalize_critic_batch_sizes,
    normalize_reward_model_micro_batch_size,
)
from verl.utils.debug import DistProfiler, DistProfilerExtension, ProfilerConfig
from verl.utils.device import get_device_id, get_device_name
from verl.utils.fs import copy_to_local
from verl.utils.fsdp_utils import (
    load_fsdp_model_to_gpu,
    load_fsdp_optimizer,
    offload_fsdp_model_to_cpu,
    offload_fsdp_optimizer,
    wrap_model_for_training,
)
from verl.utils.import_utils import import_external_libs
from verl.workers.fsdp_setup import (
    apply_lora,
    build_optimizer,
    create_device_mesh,
    get_sharding_strategy,
    init_distributed,
    load_hf_config,
    load_hf_model,
    model_dtype,
)

logger = logging.getLogger(__name__)

device_name = get_device_name()

__all__ = [
    "ActorRolloutRefWorker",
    "AsyncActorRolloutRefWorker",
    "CriticWorker",
    "RewardModelWorker",
    "create_device_mesh",
    "get_sharding_strategy",
]

_ROLES = ("actor", "rollout", "ref", "actor_rollout", "actor_rollout_ref")


def _profiler(worker: Worker, section) -> DistProfiler:
    cfg = section.get("profiler", None) if section is not None else None
    profiler_config = ProfilerConfig(
        **{k: v for k, v in (cfg or {}).items() if k in ("discrete", "all_ranks", "ranks")}
    )
    return DistProfiler(rank=worker.rank, config=profiler_config)


def _mfu_metric(flops_counter, global_token_num, elapsed: float, world_size: int) -> float:
    from verl.utils.flops_counter import mfu

    achieved, promised = flops_counter.estimate_flops(global_token_num, elapsed)
    return mfu(achieved, promised, world_size)


def _reports_compute_time(func):
    """Record the worker's own seconds in ``output.meta_info["timing"]["worker/<method>"]`` (rank 0's survives the
    collect), so the driver can tell compute from controller overhead."""
    import functools

    @functools.wraps(func)
    def wrapper(self, *args, **kwargs):
        start = time.perf_counter()
        output = func(self, *args, **kwargs)
        output.meta_info.setdefault("timing", {})[f"worker/{func.__name__}"] = time.perf_counter() - start
        return output

    return wrapper


@contextmanager
def _resident(module, optimizer=None, offload_param: bool = False, offload_optimizer: bool = False):
    """Bring an offloaded model (and optimizer state) onto the device for one call, and offload them again after."""
    if offload_param:
        load_fsdp_model_to_gpu(module)
    if optimizer is not None and offload_optimizer:
        load_fsdp_optimizer(optimizer, torch.device(device_name))
    try:
        yield
    finally:
        if offload_param:
            offload_fsdp_model_to_cpu(module)
        if optimizer is not None and offload_optimizer:
            offload_fsdp_optimizer(optimizer)


def _checkpoint_manager(model, optimizer, lr_scheduler, tokenizer, checkpoint_config):
    from verl.utils.checkpoint.fsdp_checkpoint_manager import FSDPCheckpointManager

    return FSDPCheckpointManager(
        model=model,
        optimizer=optimizer,
        lr_scheduler=lr_scheduler,
        processing_class=tokenizer,
        checkpoint_config=checkpoint_config,
    )


class ActorRolloutRefWorker(Worker, DistProfilerExtension):
    """One process of the policy: trains it (actor), samples from it (rollout), and/or scores with a frozen copy
    (ref). ``config`` is the ``actor_rollout_ref`` section."""

    def __init__(self, config: DictConfig, role: str):
        Worker.__init__(self)
        assert role in _ROLES, f"role must be one of {_ROLES}, got {role!r}"
        self.config = config
        self.role = role
        self._is_actor = role in ("actor", "actor_rollout", "actor_rollout_ref")
        self._is_rollout = role in ("rollout", "actor_rollout", "actor_rollout_ref")
        self._is_ref = role in ("ref", "actor_rollout_ref")
        self._is_lora = config.model.get("lora_rank", 0) > 0
        init_distributed()
        world_size = dist.get_world_size()
        self.device_mesh = create_device_mesh(world_size, config.actor.fsdp_config.get("fsdp_size", -1))
        self._is_offload_param = self._is_actor and config.actor.fsdp_config.get("param_offload", False)
        self._is_offload_optimizer = self._is_actor and config.actor.fsdp_config.get("optimizer_offload", False)
        if self._is_actor or self._is_ref or self._is_rollout:
            sizes = normalize_actor_batch_sizes(config, world_size)
            sizes.apply_to(self.config)
        DistProfilerExtension.__init__(self, _profiler(self, config.get("actor", None)))
        self.actor = self.rollout = self.ref_policy = None
        self.checkpoint_manager = None

    # ------------------------------------------------------------------------------------------ model building
    def _build_policy(self, trainable: bool):
        """Load the policy model (FSDP-wrapped) and, when ``trainable``, its optimizer and scheduler."""
        from transformers import AutoModelForCausalLM

        from verl.utils.tokenizer import hf_tokenizer

        model_cfg = self.config.model
        local_path = copy_to_local(model_cfg.path, use_shm=model_cfg.get("use_shm", False))
        trust = model_cfg.get("trust_remote_code", False)
        self.tokenizer = hf_tokenizer(local_path, trust_remote_code=trust)
        if model_cfg.get("custom_chat_template", None) is not None:
            self.tokenizer.chat_template = model_cfg.custom_chat_template
        self.local_path = local_path
        hf_config = load_hf_config(local_path, self.tokenizer, model_cfg.get("override_config", {}), trust)
        self.hf_config = hf_config
        fsdp_config = self.config.actor.fsdp_config if trainable else self.config.ref.fsdp_config
        dtype = model_dtype(fsdp_config, is_trainable=trainable)
        module = load_hf_model(AutoModelForCausalLM, local_path, hf_config, dtype, trust, self.device_mesh)
        if trainable and model_cfg.get("enable_gradient_checkpointing", False):
            module.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": False})
        if trainable and self._is_lora:
            module = apply_lora(module, model_cfg)
        strategy = self.config.actor.strategy if trainable else self.config.ref.strategy
        module = wrap_model_for_training(
            module,
            strategy,
            self.device_mesh,
            fsdp_config=fsdp_config,
            mixed_precision_config=fsdp_config.get("mixed_precision", None),
            cpu_offload=None if trainable else True,
            is_lora=self._is_lora and trainable,
        )
        if not trainable:
            return module, None, None
        optimizer, scheduler = build_optimizer(module, self.config.actor.optim)
        return module, optimizer, scheduler

    def _build_rollout(self):
        name = self.config.rollout.name
        if name in ("hf", "naive"):
            from verl.workers.rollout import HFRollout, NaiveRollout

            rollout_cls = HFRollout if name == "hf" else NaiveRollout
            # the HF rollout samples from the actor's own (FSDP) module: no weight hand-off needed
            return rollout_cls(self.actor_module, self.config.rollout), None
        if name == "vllm":
            from torch.distributed.device_mesh import init_device_mesh

            from verl.workers.rollout.vllm_rollout import vLLMRollout
            from verl.workers.sharding_manager.fsdp_vllm import FSDPVLLMShardingManager

            infer_tp = self.config.rollout.tensor_model_parallel_size
            world_size = dist.get_world_size()
            if world_size % infer_tp != 0:
                raise ValueError(
                    f"actor_rollout_ref.rollout.tensor_model_parallel_size={infer_tp} must divide the number of "
                    f"workers ({world_size})"
                )
            rollout_mesh = init_device_mesh(
                device_name, (world_size // infer_tp, infer_tp), mesh_dim_names=("dp", "infer_tp")
            )
            rollout = vLLMRollout(
                model_path=self.local_path,
                config=self.config.rollout,
                tokenizer=self.tokenizer,
                model_hf_config=self.hf_config,
                trust_remote_code=self.config.model.get("trust_remote_code", False),
            )
            load_format = self.config.rollout.load_format
            manager = FSDPVLLMShardingManager(
                module=self.actor_module,
                inference_engine=rollout.inference_engine,
                model_config=self.hf_config,
                full_params="hf" in load_format,
                device_mesh=rollout_mesh,
                offload_param=self._is_offload_param,
                load_format=load_format,
                layered_summon=self.config.rollout.get("layered_summon", False),
            )
            return rollout, manager
        if name == "sglang":
            raise NotImplementedError(
                "rollout.name=sglang needs the sglang package, which has no CPU build; use hf or vllm here"
            )
        raise ValueError(f"actor_rollout_ref.rollout.name={name!r} is not supported; expected hf, vllm or sglang")

    @register(dispatch_mode=Dispatch.ONE_TO_ALL)
    def init_model(self):
        """Build the models this role needs (actor + optimizer, rollout engine, reference)."""
        from verl.workers.actor import DataParallelPPOActor

        import_external_libs(self.config.model.get("external_lib", None))
        if self._is_actor or self._is_rollout:
            trainable = self._is_actor
            self.actor_module, self.actor_optimizer, self.actor_lr_scheduler = self._build_policy(trainable)
            if self._is_actor:
                with open_dict(self.config.actor):
                    self.config.actor.use_remove_padding = self.config.model.get("use_remove_padding", False)
                    self.config.actor.use_fused_kernels = self.config.model.get("use_fused_kernels", False)
                self.actor = DataParallelPPOActor(self.config.actor, self.actor_module, self.actor_optimizer)
                from verl.utils.flops_counter import FlopsCounter

                self.flops_counter = FlopsCounter(self.hf_config)
        if self._is_rollout:
            self.rollout, self.rollout_sharding_manager = self._build_rollout()
        if self._is_ref:
            ref_module, _, _ = self._build_policy(trainable=False)
            with open_dict(self.config.ref):
                self.config.ref.use_remove_padding = self.config.model.get("use_remove_padding", False)
            self.ref_policy = DataParallelPPOActor(self.config.ref, ref_module)
        if self._is_offload_param:
            offload_fsdp_model_to_cpu(self.actor_module)
        if self._is_offload_optimizer:
            offload_fsdp_optimizer(self.actor_optimizer)

    # ------------------------------------------------------------------------------------------------ methods
    def _on_device(self, with_optimizer: bool = False):
        """Bring offloaded actor params (and optimizer state) back for the duration of a call."""
        optimizer = self.actor_optimizer if with_optimizer else None
        return _resident(self.actor_module, optimizer, self._is_offload_param, self._is_offload_optimizer)

    @register(dispatch_mode=Dispatch.DP_COMPUTE_PROTO)
    def generate_sequences(self, prompts: DataProto) -> DataProto:
        """Sample responses for left-padded prompts (n per prompt, interleaved)."""
        assert self._is_rollout, f"generate_sequences needs a rollout role, this worker is {self.role!r}"
        generation_config = getattr(self.actor_module, "generation_config", None)
        eos = getattr(generation_config, "eos_token_id", None) if generation_config is not None else None
        prompts.meta_info["eos_token_id"] = eos if eos is not None else self.tokenizer.eos_token_id
        prompts.meta_info["pad_token_id"] = self.tokenizer.pad_token_id
        start = time.perf_counter()
        manager = self.rollout_sharding_manager or nullcontext()
        with self._on_device(), manager:
            reshard = getattr(manager, "timing", {}).get("reshard", time.perf_counter() - start)
            if self.rollout_sharding_manager is not None:
                prompts = self.rollout_sharding_manager.preprocess_data(prompts)
            with self._sampling_seed(prompts.meta_info.get("global_steps", 0)):
                output = self.rollout.generate_sequences(prompts=prompts)
            if self.rollout_sharding_manager is not None:
                output = self.rollout_sharding_manager.postprocess_data(output)
        output.meta_info["timing"] = {"generate_sequences": time.perf_counter() - start, "reshard": reshard}
        return output.to("cpu")

    @contextmanager
    def _sampling_seed(self, global_step: int):
        """Seed sampling from (rollout.seed, step, rank), so a resumed run draws exactly the samples an
        uninterrupted one would, whatever else used the global RNG in between. The global RNG stream is restored
        afterwards."""
        on_device = device_name != "cpu"
        devices = [get_device_id()] if on_device else []
        with torch.random.fork_rng(devices=devices, device_type=device_name if on_device else "cuda"):
            base = int(self.config.rollout.get("seed", 0) or 0)
            torch.manual_seed((base * 1_000_003 + int(global_step)) * 65_537 + self.rank)
            yield

    def _log_prob_meta(self, data: DataProto, section) -> None:
        data.meta_info["micro_batch_size"] = section.log_prob_micro_batch_size_per_gpu
        data.meta_info["max_token_len"] = section.log_prob_max_token_len_per_gpu
        data.meta_info["use_dynamic_bsz"] = section.log_prob_use_dynamic_bsz
        data.meta_info["temperature"] = self.config.rollout.temperature

    @register(dispatch_mode=Dispatch.DP_COMPUTE_PROTO)
    @_reports_compute_time
    def compute_log_prob(self, data: DataProto) -> DataProto:
        """``old_log_probs`` and ``entropys`` ``(bs, response_length)`` under the current policy."""
        assert self._is_actor, f"compute_log_prob needs the actor role, this worker is {self.role!r}"
        is_lora = data.meta_info.pop("is_lora", False)
        self._log_prob_meta(data, self.config.rollout)
        adapter_off = self.actor_module.disable_adapter() if is_lora else nullcontext()
        with self._on_device(), adapter_off:
            log_probs, entropys = self.actor.compute_log_prob(data=data, calculate_entropy=True)
        return DataProto.from_dict(
            {"old_log_probs": log_probs, "entropys": entropys},
            meta_info={"temperature": self.config.rollout.temperature},
        ).to("cpu")

    @register(dispatch_mode=Dispatch.DP_COMPUTE_PROTO)
    @_reports_compute_time
    def compute_ref_log_prob(self, data: DataProto) -> DataProto:
        """``ref_log_prob`` ``(bs, response_length)`` under the frozen reference (LoRA: adapters disabled)."""
        if self._is_lora and self.ref_policy is None:
            data.meta_info["is_lora"] = True
            out = self.compute_log_prob(data)
            return DataProto.from_dict({"ref_log_prob": out.batch["old_log_probs"]})
        assert self._is_ref, f"compute_ref_log_prob needs the ref role, this worker is {self.role!r}"
        self._log_prob_meta(data, self.config.ref)
        log_probs, _ = self.ref_policy.compute_log_prob(data=data, calculate_entropy=False)
        return DataProto.from_dict({"ref_log_prob": log_probs}).to("cpu")

    @register(dispatch_mode=Dispatch.DP_COMPUTE_PROTO)
    @_reports_compute_time
    def update_actor(self, data: DataProto) -> DataProto:
        """One PPO update over ``data``; returns ``meta_info["metrics"]`` (lists per key)."""
        assert self._is_actor, f"update_actor needs the actor role, this worker is {self.role!r}"
        data = data.to("cpu")
        with self._on_device(with_optimizer=True):
            start = time.perf_counter()
            metrics = self.actor.update_policy(data=data)
            elapsed = time.perf_counter() - start
            metrics["perf/mfu/actor"] = (
                _mfu_metric(self.flops_counter, data.meta_info.get("global_token_num", []), elapsed, self.world_size)
                * self.config.actor.ppo_epochs
            )
            metrics["actor/lr"] = self.actor_lr_scheduler.get_last_lr()[0]
            self.actor_lr_scheduler.step()
        return DataProto(meta_info={"metrics": metrics})

    @register(dispatch_mode=Dispatch.ONE_TO_ALL)
    def save_checkpoint(self, local_path, hdfs_path=None, global_step=0, max_ckpt_to_keep=None):
        """Save this rank's shard of model / optimizer / extra state under ``local_path``."""
        assert self._is_actor, f"save_checkpoint needs the actor role, this worker is {self.role!r}"
        with self._on_device():
            self._checkpointer().save_checkpoint(
                local_path=local_path, hdfs_path=hdfs_path, global_step=global_step, max_ckpt_to_keep=max_ckpt_to_keep
            )
        dist.barrier()

    def _checkpointer(self):
        """The checkpoint manager of the actor, built on first use."""
        if self.checkpoint_manager is None:
            self.checkpoint_manager = _checkpoint_manager(
                self.actor_module,
                self.actor_optimizer,
                self.actor_lr_scheduler,
                self.tokenizer,
                self.config.actor.get("checkpoint", None),
            )
        return self.checkpoint_manager

    @register(dispatch_mode=Dispatch.ONE_TO_ALL)
    def load_checkpoint(self, local_path, hdfs_path=None, del_local_after_load=False):
        """Restore this rank's shard saved by :meth:`save_checkpoint`."""
        assert self._is_actor or self._is_rollout, f"load_checkpoint: role {self.role!r} holds no checkpoint"
        with self._on_device():
            self._checkpointer().load_checkpoint(
                local_path=local_path, hdfs_path=hdfs_path, del_local_after_load=del_local_after_load
            )
        if self._is_offload_optimizer:
            offload_fsdp_optimizer(self.actor_optimizer)


class AsyncActorRolloutRefWorker(ActorRolloutRefWorker):
    """The actor-rollout worker for ``rollout.mode=async`` (server-based generation)."""

    @register(dispatch_mode=Dispatch.DP_COMPUTE_PROTO)
    def generate_sequences(self, prompts: DataProto) -> DataProto:
        raise NotImplementedError("in async mode, generation goes through AsyncLLMServerManager, not the worker")


class CriticWorker(Worker, DistProfilerExtension):
    """One process of the value model (``critic`` section)."""

    def __init__(self, config: DictConfig):
        Worker.__init__(self)
        self.config = config
        init_distributed()
        world_size = dist.get_world_size()
        fsdp_config = config.model.fsdp_config
        self.device_mesh = create_device_mesh(world_size, fsdp_config.get("fsdp_size", -1))
        self._is_offload_param = fsdp_config.get("param_offload", False)
        self._is_offload_optimizer = fsdp_config.get("optimizer_offload", False)
        normalize_critic_batch_sizes(config, world_size).apply_to(self.config)
        DistProfilerExtension.__init__(self, _profiler(self, config))

    @register(dispatch_mode=Dispatch.ONE_TO_ALL)
    def init_model(self):
        """Load the value model (token classification, one label) with its optimizer."""
        from transformers import AutoModelForTokenClassification

        from verl.utils.flops_counter import FlopsCounter
        from verl.utils.tokenizer import hf_tokenizer
        from verl.workers.critic import DataParallelPPOCritic

        import_external_libs(self.config.model.get("external_lib", None))
        model_cfg = self.config.model
        trust = model_cfg.get("trust_remote_code", False)
        local_path = copy_to_local(model_cfg.path, use_shm=model_cfg.get("use_shm", False))
        tokenizer_path = copy_to_local(model_cfg.get("tokenizer_path", None) or model_cfg.path)
        self.tokenizer = hf_tokenizer(tokenizer_path, trust_remote_code=trust)
        hf_config = load_hf_config(
            local_path, self.tokenizer, model_cfg.get("override_config", {}), trust, num_labels=1
        )
        # dropout makes value targets noisy and runs irreproducible
        for key in ("classifier_dropout", "hidden_dropout", "summary_dropout_prob", "attention_dropout"):
            if hasattr(hf_config, key):
                setattr(hf_config, key, 0.0)
        dtype = model_dtype(model_cfg.fsdp_config, is_trainable=True)
        module = load_hf_model(AutoModelForTokenClassification, local_path, hf_config, dtype, trust, self.device_mesh)
        if model_cfg.get("enable_gradient_checkpointing", False):
            module.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": False})
        if model_cfg.get("lora_rank", 0) > 0:
            module = apply_lora(module, model_cfg, task_type="TOKEN_CLS")
        module = wrap_model_for_training(
            module,
            self.config.strategy,
            self.device_mesh,
            fsdp_config=model_cfg.fsdp_config,
            mixed_precision_config=model_cfg.fsdp_config.get("mixed_precision", None),
            is_lora=model_cfg.get("lora_rank", 0) > 0,
        )
        self.critic_module = module
        self.critic_optimizer, self.critic_lr_scheduler = build_optimizer(module, self.config.optim)
        self.critic = DataParallelPPOCritic(self.config, self.critic_module, self.critic_optimizer)
        self.flops_counter = FlopsCounter(hf_config)
        self.checkpoint_manager = None
        if self._is_offload_param:
            offload_fsdp_model_to_cpu(self.critic_module)
        if self._is_offload_optimizer:
            offload_fsdp_optimizer(self.critic_optimizer)

    def _loaded(self, optimizer: bool = False):
        """Bring offloaded critic params (and optimizer state) back for the duration of a call."""
        return _resident(
            self.critic_module,
            self.critic_optimizer if optimizer else None,
            self._is_offload_param,
            self._is_offload_optimizer,
        )

    @register(dispatch_mode=Dispatch.DP_COMPUTE_PROTO)
    @_reports_compute_time
    def compute_values(self, data: DataProto) -> DataProto:
        """``values`` ``(bs, response_length)`` for the responses in ``data``."""
        data.meta_info["micro_batch_size"] = self.config.forward_micro_batch_size_per_gpu
        data.meta_info["max_token_len"] = self.config.forward_max_token_len_per_gpu
        data.meta_info["use_dynamic_bsz"] = self.config.use_dynamic_bsz
        with self._loaded():
            values = self.critic.compute_values(data=data)
        return DataProto.from_dict({"values": values}).to("cpu")

    @register(dispatch_mode=Dispatch.DP_COMPUTE_PROTO)
    @_reports_compute_time
    def update_critic(self, data: DataProto) -> DataProto:
        """One value-function update; returns ``meta_info["metrics"]``."""
        data = data.to("cpu")
        with self._loaded(optimizer=True):
            start = time.perf_counter()
            metrics = self.critic.update_critic(data=data)
            elapsed = time.perf_counter() - start
            self.critic_lr_scheduler.step()
            metrics["critic/lr"] = self.critic_lr_scheduler.get_last_lr()[0]
            metrics["perf/mfu/critic"] = (
                _mfu_metric(self.flops_counter, data.meta_info.get("global_token_num", []), elapsed, self.world_size)
                * self.config.ppo_epochs
            )
        return DataProto(batch=None, meta_info={"metrics": metrics})

    def _checkpointer(self):
        if self.checkpoint_manager is None:
            self.checkpoint_manager = _checkpoint_manager(
                self.critic_module,
                self.critic_optimizer,
                self.critic_lr_scheduler,
                self.tokenizer,
                self.config.get("checkpoint", None),
            )
        return self.checkpoint_manager

    @register(dispatch_mode=Dispatch.ONE_TO_ALL)
    def save_checkpoint(self, local_path, hdfs_path=None, global_step=0, max_ckpt_to_keep=None):
        with self._loaded():
            self._checkpointer().save_checkpoint(
                local_path=local_path, hdfs_path=hdfs_path, global_step=global_step, max_ckpt_to_keep=max_ckpt_to_keep
            )
        dist.barrier()

    @register(dispatch_mode=Dispatch.ONE_TO_ALL)
    def load_checkpoint(self, local_path, hdfs_path=None, del_local_after_load=True):
        with self._loaded():
            self._checkpointer().load_checkpoint(
                local_path=local_path, hdfs_path=hdfs_path, del_local_after_load=del_local_after_load
            )
        if self._is_offload_optimizer:
            offload_fsdp_optimizer(self.critic_optimizer)


class RewardModelWorker(Worker, DistProfilerExtension):
    """One process of a sequence-scoring reward model (``reward_model`` section)."""

    def __init__(self, config: DictConfig):
        Worker.__init__(self)
        self.config = config
        init_distributed()
        world_size = dist.get_world_size()
        self.device_mesh = create_device_mesh(world_size, config.model.fsdp_config.get("fsdp_size", -1))
        self.micro_batch_size = normalize_reward_model_micro_batch_size(config, world_size)
        DistProfilerExtension.__init__(self, _profiler(self, config))

    @register(dispatch_mode=Dispatch.ONE_TO_ALL)
    def init_model(self):
        """Load the reward model (token classification with one label; the score is read at the last token)."""
        from transformers import AutoModelForTokenClassification

        from verl.utils.tokenizer import hf_tokenizer

        import_external_libs(self.config.model.get("external_lib", None))
        model_cfg = self.config.model
        trust = model_cfg.get("trust_remote_code", False)
        local_path = copy_to_local(model_cfg.path, use_shm=model_cfg.get("use_shm", False))
        self.tokenizer = hf_tokenizer(local_path, trust_remote_code=trust)
        self.input_tokenizer = None
        if model_cfg.get("input_tokenizer", None):
            input_tokenizer = hf_tokenizer(copy_to_local(model_cfg.input_tokenizer), trust_remote_code=trust)
            # re-tokenizing with the reward model's chat template is only needed when the two tokenizers differ
            same = input_tokenizer.get_vocab() == self.tokenizer.get_vocab() and (
                input_tokenizer.chat_template == self.tokenizer.chat_template
            )
            self.input_tokenizer = None if same else input_tokenizer
        hf_config = load_hf_config(local_path, self.tokenizer, {}, trust, num_labels=1)
        hf_config.classifier_dropout = 0.0
        dtype = model_dtype(model_cfg.fsdp_config, is_trainable=False)
        module = load_hf_model(AutoModelForTokenClassification, local_path, hf_config, dtype, trust, self.device_mesh)
        self.reward_module = wrap_model_for_training(
            module, self.config.strategy, self.device_mesh, fsdp_config=model_cfg.fsdp_config, cpu_offload=True
        )

    @register(dispatch_mode=Dispatch.DP_COMPUTE_PROTO)
    @_reports_compute_time
    def compute_rm_score(self, data: DataProto) -> DataProto:
        """``rm_scores`` ``(bs, response_length)``: the model's score at the last valid token, zeros elsewhere."""
        from verl.workers.reward_model_inputs import score_sequences, switch_chat_template

        if self.input_tokenizer is not None:
            inputs = switch_chat_template(data, self.input_tokenizer, self.tokenizer, self.config)
        else:
            inputs = data.batch
        scores = score_sequences(self.reward_module, inputs, self.micro_batch_size or len(data))
        response_length = data.batch["responses"].shape[-1]
        attention_mask = data.batch["attention_mask"]
        position_ids = data.batch["position_ids"]
        last = torch.argmax(position_ids * attention_mask, dim=-1)
        token_level = torch.zeros_like(attention_mask, dtype=scores.dtype)
        token_level[torch.arange(len(data)), last] = scores
        return DataProto.from_dict({"rm_scores": token_level[:, -response_length:]}).to("cpu")
