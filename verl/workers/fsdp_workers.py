"""FSDP workers: actor / rollout / reference policy, critic and reward model, each one process per device.

The trainer calls their ``@register``ed methods through worker groups; the heavy lifting lives in the engines
(``DataParallelPPOActor``, ``DataParallelPPOCritic``, the rollouts) and in ``fsdp_setup``.

Ulysses sequence parallelism (``ulysses_sequence_parallel_size`` = sp > 1): the actor/reference and the critic
each build a ``("dp", "sp")`` mesh and run their compute methods inside its ``FSDPUlyssesShardingManager``. The
dispatch stays per rank (DP_COMPUTE_PROTO, one chunk per worker); the manager all-gathers the chunks of an SP group
so its ranks work on the same rows, each on a slice of every packed sequence, and hands each rank its own rows'
results back for the collect. Batch sizes are per dp rank (``workers / sp``).
"""

from __future__ import annotations

import copy
import logging
import time
from contextlib import contextmanager, nullcontext

import torch
import torch.distributed as dist
from omegaconf import DictConfig

from verl import DataProto
from verl.single_controller.base import Worker
from verl.single_controller.base.decorator import Dispatch, register
from verl.utils.batch_sizes import (
    normalize_actor_batch_sizes,
    normalize_critic_batch_sizes,
    normalize_reward_model_micro_batch_size,
)
from verl.utils.config import omega_conf_to_dataclass
from verl.utils.debug import DistProfiler, DistProfilerExtension, ProfilerConfig
from verl.utils.device import (
    get_device_id,
    get_device_name,
    peak_rss_gb,
)
from verl.utils.distributed import init_distributed
from verl.utils.import_utils import import_external_libs
from verl.workers.config import ActorRolloutRefConfig, CriticConfig, RewardModelConfig
from verl.workers.engine.fsdp.offload import OffloadGuard
from verl.workers.engine.fsdp.setup import (
    build_fsdp_model,
    build_optimizer,
    create_device_mesh,
    get_sharding_strategy,
    ulysses_sharding_manager,
)
from verl.workers.engine.pretrained import load_pretrained, policy_auto_class
from verl.workers.phase_wrappers import compute_phase, reports_compute_time

logger = logging.getLogger(__name__)

device_name = get_device_name()

__all__ = [
    "ActorRolloutRefWorker",
    "AsyncActorRolloutRefWorker",
    "CriticWorker",
    "OffloadGuard",
    "RewardModelWorker",
    "create_device_mesh",
    "get_sharding_strategy",
]

_ROLES = ("actor", "rollout", "ref", "actor_rollout", "actor_rollout_ref")


def _typed(config, section_type):
    """The worker's own typed copy of its config section (a DictConfig from a recipe, or a typed section).

    A copy, because the worker rewrites batch sizes to per-rank values: with the in-process group the trainer's
    object must not change under it.
    """
    return copy.deepcopy(omega_conf_to_dataclass(config, section_type, allow_extra=True))


def _profiler(worker: Worker, profiler_config: ProfilerConfig) -> DistProfiler:
    return DistProfiler(rank=worker.rank, config=profiler_config)


def _mfu_metric(flops_counter, global_token_num, elapsed: float, world_size: int) -> float:
    from verl.utils.flops_counter import mfu

    achieved, promised = flops_counter.estimate_flops(global_token_num, elapsed)
    return mfu(achieved, promised, world_size)


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

    def __init__(self, config: ActorRolloutRefConfig | DictConfig, role: str):
        Worker.__init__(self)
        assert role in _ROLES, f"role must be one of {_ROLES}, got {role!r}"
        self.config = config = _typed(config, ActorRolloutRefConfig)
        self.role = role
        self._is_actor = role in ("actor", "actor_rollout", "actor_rollout_ref")
        self._is_rollout = role in ("rollout", "actor_rollout", "actor_rollout_ref")
        self._is_ref = role in ("ref", "actor_rollout_ref")
        self._is_lora = config.model.is_lora
        init_distributed()
        world_size = dist.get_world_size()
        fsdp_config = config.actor.fsdp_config
        self.device_mesh = create_device_mesh(world_size, fsdp_config.fsdp_size)
        # actor and reference share one ("dp", "sp") mesh (the config check refuses a ref sp that differs)
        self.ulysses_sp_size = config.actor.ulysses_sequence_parallel_size
        self.ulysses_sharding_manager = ulysses_sharding_manager(world_size, self.ulysses_sp_size)
        self.offload = OffloadGuard(
            offload_param=self._is_actor and fsdp_config.param_offload,
            offload_optimizer=self._is_actor and fsdp_config.optimizer_offload,
        )
        if role != "rollout":  # a standalone rollout (main_generation) neither trains nor computes log-probs
            normalize_actor_batch_sizes(config, world_size).apply_to(config)
        # the engines read these from their own section (verl copies them from model.*)
        for section in (config.actor, config.ref):
            section.use_remove_padding = config.model.use_remove_padding
            section.use_fused_kernels = config.model.use_fused_kernels
        DistProfilerExtension.__init__(self, _profiler(self, config.actor.profiler))
        self.actor = self.rollout = self.ref_policy = None
        self.processor = None
        self.checkpoint_manager = None

    # ------------------------------------------------------------------------------------------ model building
    def _build_policy(self, trainable: bool):
        """Load the policy model (FSDP-wrapped) and, when ``trainable``, its optimizer and scheduler."""
        model_cfg = self.config.model
        files = load_pretrained(
            model_cfg.path,
            use_shm=model_cfg.use_shm,
            trust_remote_code=model_cfg.trust_remote_code,
            override_config=model_cfg.override_config,
            chat_template=model_cfg.custom_chat_template,
        )
        self.tokenizer, self.local_path, self.hf_config = files.tokenizer, files.local_path, files.hf_config
        self.processor = files.processor  # vision-language models: saved with checkpoints
        # a standalone rollout samples from a copy built like the actor's (its strategy and fsdp_config, resident on
        # the device) but without an optimizer; only the reference is the frozen, offloaded copy
        as_actor = trainable or self.role == "rollout"
        section = self.config.actor if as_actor else self.config.ref
        module = build_fsdp_model(
            policy_auto_class(files.hf_config),
            files,
            strategy=section.strategy,
            fsdp_config=section.fsdp_config,
            device_mesh=self.device_mesh,
            trainable=trainable,
            trust_remote_code=model_cfg.trust_remote_code,
            gradient_checkpointing=model_cfg.enable_gradient_checkpointing,
            lora_config=model_cfg if trainable and self._is_lora else None,
            cpu_offload=None if as_actor else True,
            ulysses_sp_size=self.ulysses_sp_size,
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
                trust_remote_code=self.config.model.trust_remote_code,
            )
            load_format = self.config.rollout.load_format
            manager = FSDPVLLMShardingManager(
                module=self.actor_module,
                inference_engine=rollout.inference_engine,
                model_config=self.hf_config,
                full_params="hf" in load_format,
                device_mesh=rollout_mesh,
                offload_param=self.offload.offload_param,
                load_format=load_format,
                layered_summon=self.config.rollout.layered_summon,
                free_cache_engine=self.config.rollout.free_cache_engine,
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

        import_external_libs(self.config.model.external_lib)
        if self._is_actor or self._is_rollout:
            self.actor_module, self.actor_optimizer, self.actor_lr_scheduler = self._build_policy(self._is_actor)
            if self._is_actor:
                self.actor = DataParallelPPOActor(self.config.actor, self.actor_module, self.actor_optimizer)
                from verl.utils.flops_counter import FlopsCounter

                self.flops_counter = FlopsCounter(self.hf_config)
        if self._is_rollout:
            self.rollout, self.rollout_sharding_manager = self._build_rollout()
            if self.config.rollout.uses_agent_loops:
                from verl.workers.rollout.multi_turn import AgentLoopRollout

                self.rollout = AgentLoopRollout(self.rollout, self.config.rollout, self.tokenizer)
        if self._is_ref:
            ref_module, _, _ = self._build_policy(trainable=False)
            self.ref_policy = DataParallelPPOActor(self.config.ref, ref_module)
        if self._is_actor or self._is_rollout:
            self.offload.attach(self.actor_module, self.actor_optimizer)

    # ------------------------------------------------------------------------------------------------ methods
    @register(dispatch_mode=Dispatch.DP_COMPUTE_PROTO)
    @compute_phase
    def generate_sequences(self, prompts: DataProto) -> DataProto:
        """Sample responses for left-padded prompts (n per prompt, interleaved)."""
        assert self._is_rollout, f"generate_sequences needs a rollout role, this worker is {self.role!r}"
        generation_config = getattr(self.actor_module, "generation_config", None)
        eos = getattr(generation_config, "eos_token_id", None) if generation_config is not None else None
        prompts.meta_info["eos_token_id"] = eos if eos is not None else self.tokenizer.eos_token_id
        prompts.meta_info["pad_token_id"] = self.tokenizer.pad_token_id
        start = time.perf_counter()
        manager = self.rollout_sharding_manager or nullcontext()
        with self.offload.resident(), manager:
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
            base = self.config.rollout.seed
            torch.manual_seed((base * 1_000_003 + int(global_step)) * 65_537 + self.rank)
            yield

    def _log_prob_meta(self, data: DataProto, section) -> None:
        data.meta_info["micro_batch_size"] = section.log_prob_micro_batch_size_per_gpu
        data.meta_info["max_token_len"] = section.log_prob_max_token_len_per_gpu
        data.meta_info["use_dynamic_bsz"] = section.log_prob_use_dynamic_bsz
        data.meta_info["temperature"] = self.config.rollout.temperature

    @register(dispatch_mode=Dispatch.DP_COMPUTE_PROTO)
    @compute_phase
    @reports_compute_time
    def compute_log_prob(self, data: DataProto) -> DataProto:
        """``old_log_probs`` and ``entropys`` ``(bs, response_length)`` under the current policy."""
        assert self._is_actor, f"compute_log_prob needs the actor role, this worker is {self.role!r}"
        is_lora = data.meta_info.pop("is_lora", False)
        self._log_prob_meta(data, self.config.rollout)
        adapter_off = self.actor_module.disable_adapter() if is_lora else nullcontext()
        sp = self.ulysses_sharding_manager
        with self.offload.resident(), adapter_off, sp:
            log_probs, entropys = self.actor.compute_log_prob(data=sp.preprocess_data(data), calculate_entropy=True)
            output = DataProto.from_dict(
                {"old_log_probs": log_probs, "entropys": entropys},
                meta_info={"temperature": self.config.rollout.temperature},
            )
            output = sp.postprocess_data(output)
        return output.to("cpu")

    @register(dispatch_mode=Dispatch.DP_COMPUTE_PROTO)
    @compute_phase
    @reports_compute_time
    def compute_ref_log_prob(self, data: DataProto) -> DataProto:
        """``ref_log_prob`` ``(bs, response_length)`` under the frozen reference (LoRA: adapters disabled)."""
        if self._is_lora and self.ref_policy is None:
            data.meta_info["is_lora"] = True
            out = self.compute_log_prob(data)
            return DataProto.from_dict({"ref_log_prob": out.batch["old_log_probs"]})
        assert self._is_ref, f"compute_ref_log_prob needs the ref role, this worker is {self.role!r}"
        self._log_prob_meta(data, self.config.ref)
        with self.ulysses_sharding_manager as sp:
            log_probs, _ = self.ref_policy.compute_log_prob(data=sp.preprocess_data(data), calculate_entropy=False)
            output = sp.postprocess_data(DataProto.from_dict({"ref_log_prob": log_probs}))
        return output.to("cpu")

    @register(dispatch_mode=Dispatch.DP_COMPUTE_PROTO)
    @compute_phase
    @reports_compute_time
    def update_actor(self, data: DataProto) -> DataProto:
        """One PPO update over ``data``; returns ``meta_info["metrics"]`` (lists per key)."""
        assert self._is_actor, f"update_actor needs the actor role, this worker is {self.role!r}"
        data = data.to("cpu")
        with self.offload.resident(with_optimizer=True), self.ulysses_sharding_manager as sp:
            start = time.perf_counter()
            metrics = self.actor.update_policy(data=sp.preprocess_data(data))
            elapsed = time.perf_counter() - start
            metrics["perf/mfu/actor"] = (
                _mfu_metric(self.flops_counter, data.meta_info.get("global_token_num", []), elapsed, self.world_size)
                * self.config.actor.ppo_epochs
            )
            metrics["actor/lr"] = self.actor_lr_scheduler.get_last_lr()[0]
            metrics["perf/peak_rss_gb/worker"] = peak_rss_gb()
            self.actor_lr_scheduler.step()
        return DataProto(meta_info={"metrics": metrics})

    @register(dispatch_mode=Dispatch.ONE_TO_ALL)
    def save_checkpoint(self, local_path, hdfs_path=None, global_step=0, max_ckpt_to_keep=None):
        """Save this rank's shard of model / optimizer / extra state under ``local_path``."""
        assert self._is_actor, f"save_checkpoint needs the actor role, this worker is {self.role!r}"
        with self.offload.resident():
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
                self.processor or self.tokenizer,
                self.config.actor.checkpoint,
            )
        return self.checkpoint_manager

    @register(dispatch_mode=Dispatch.ONE_TO_ALL)
    def load_checkpoint(self, local_path, hdfs_path=None, del_local_after_load=False):
        """Restore this rank's shard saved by :meth:`save_checkpoint`."""
        assert self._is_actor or self._is_rollout, f"load_checkpoint: role {self.role!r} holds no checkpoint"
        with self.offload.resident():
            self._checkpointer().load_checkpoint(
                local_path=local_path, hdfs_path=hdfs_path, del_local_after_load=del_local_after_load
            )
        self.offload.offload_optimizer_state()


class AsyncActorRolloutRefWorker(ActorRolloutRefWorker):
    """The actor-rollout worker for ``rollout.mode=async``.

    Its rollout runs agent loops (``init_model`` builds it, as for ``multi_turn.enable``); with vLLM each turn is a
    request of its own on the worker's engine, continuously batched. The trainer calls ``generate_sequences`` as in
    sync mode, and the weight hand-off around it is the same, so no separate server process is needed.
    """


class CriticWorker(Worker, DistProfilerExtension):
    """One process of the value model (``critic`` section)."""

    def __init__(self, config: CriticConfig | DictConfig):
        Worker.__init__(self)
        self.config = config = _typed(config, CriticConfig)
        init_distributed()
        world_size = dist.get_world_size()
        fsdp_config = config.model.fsdp_config
        self.device_mesh = create_device_mesh(world_size, fsdp_config.fsdp_size)
        self.ulysses_sharding_manager = ulysses_sharding_manager(world_size, config.ulysses_sequence_parallel_size)
        self.offload = OffloadGuard(fsdp_config.param_offload, fsdp_config.optimizer_offload)
        normalize_critic_batch_sizes(config, world_size).apply_to(config)
        DistProfilerExtension.__init__(self, _profiler(self, config.profiler))

    @register(dispatch_mode=Dispatch.ONE_TO_ALL)
    def init_model(self):
        """Load the value model (token classification, one label) with its optimizer."""
        from transformers import AutoModelForTokenClassification

        from verl.utils.flops_counter import FlopsCounter
        from verl.workers.critic import DataParallelPPOCritic

        model_cfg = self.config.model
        import_external_libs(model_cfg.external_lib)
        files = load_pretrained(
            model_cfg.path,
            use_shm=model_cfg.use_shm,
            trust_remote_code=model_cfg.trust_remote_code,
            tokenizer_path=model_cfg.tokenizer_path,
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
        self.critic_module = build_fsdp_model(
            AutoModelForTokenClassification,
            files,
            strategy=self.config.strategy,
            fsdp_config=model_cfg.fsdp_config,
            device_mesh=self.device_mesh,
            trainable=True,
            trust_remote_code=model_cfg.trust_remote_code,
            gradient_checkpointing=model_cfg.enable_gradient_checkpointing,
            lora_config=model_cfg if model_cfg.is_lora else None,
            lora_task_type="TOKEN_CLS",
            ulysses_sp_size=self.config.ulysses_sequence_parallel_size,
        )
        self.critic_optimizer, self.critic_lr_scheduler = build_optimizer(self.critic_module, self.config.optim)
        self.critic = DataParallelPPOCritic(self.config, self.critic_module, self.critic_optimizer)
        self.flops_counter = FlopsCounter(files.hf_config)
        self.checkpoint_manager = None
        self.offload.attach(self.critic_module, self.critic_optimizer)

    @register(dispatch_mode=Dispatch.DP_COMPUTE_PROTO)
    @compute_phase
    @reports_compute_time
    def compute_values(self, data: DataProto) -> DataProto:
        """``values`` ``(bs, response_length)`` for the responses in ``data``."""
        data.meta_info["micro_batch_size"] = self.config.forward_micro_batch_size_per_gpu
        data.meta_info["max_token_len"] = self.config.forward_max_token_len_per_gpu
        data.meta_info["use_dynamic_bsz"] = self.config.use_dynamic_bsz
        with self.offload.resident(), self.ulysses_sharding_manager as sp:
            values = self.critic.compute_values(data=sp.preprocess_data(data))
            output = sp.postprocess_data(DataProto.from_dict({"values": values}))
        return output.to("cpu")

    @register(dispatch_mode=Dispatch.DP_COMPUTE_PROTO)
    @compute_phase
    @reports_compute_time
    def update_critic(self, data: DataProto) -> DataProto:
        """One value-function update; returns ``meta_info["metrics"]``."""
        data = data.to("cpu")
        with self.offload.resident(with_optimizer=True), self.ulysses_sharding_manager as sp:
            start = time.perf_counter()
            metrics = self.critic.update_critic(data=sp.preprocess_data(data))
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
                self.config.checkpoint,
            )
        return self.checkpoint_manager

    @register(dispatch_mode=Dispatch.ONE_TO_ALL)
    def save_checkpoint(self, local_path, hdfs_path=None, global_step=0, max_ckpt_to_keep=None):
        with self.offload.resident():
            self._checkpointer().save_checkpoint(
                local_path=local_path, hdfs_path=hdfs_path, global_step=global_step, max_ckpt_to_keep=max_ckpt_to_keep
            )
        dist.barrier()

    @register(dispatch_mode=Dispatch.ONE_TO_ALL)
    def load_checkpoint(self, local_path, hdfs_path=None, del_local_after_load=True):
        with self.offload.resident():
            self._checkpointer().load_checkpoint(
                local_path=local_path, hdfs_path=hdfs_path, del_local_after_load=del_local_after_load
            )
        self.offload.offload_optimizer_state()


class RewardModelWorker(Worker, DistProfilerExtension):
    """One process of a sequence-scoring reward model (``reward_model`` section)."""

    def __init__(self, config: RewardModelConfig | DictConfig):
        Worker.__init__(self)
        self.config = config = _typed(config, RewardModelConfig)
        init_distributed()
        world_size = dist.get_world_size()
        self.device_mesh = create_device_mesh(world_size, config.model.fsdp_config.fsdp_size)
        self.micro_batch_size = normalize_reward_model_micro_batch_size(config, world_size)
        DistProfilerExtension.__init__(self, _profiler(self, config.profiler))

    @register(dispatch_mode=Dispatch.ONE_TO_ALL)
    def init_model(self):
        """Load the reward model (token classification with one label; the score is read at the last token)."""
        from transformers import AutoModelForTokenClassification

        from verl.utils.fs import copy_to_local
        from verl.utils.tokenizer import hf_tokenizer

        model_cfg = self.config.model
        import_external_libs(model_cfg.external_lib)
        trust = model_cfg.trust_remote_code
        files = load_pretrained(model_cfg.path, use_shm=model_cfg.use_shm, trust_remote_code=trust, num_labels=1)
        self.tokenizer = files.tokenizer
        self.input_tokenizer = None
        if model_cfg.input_tokenizer:
            input_tokenizer = hf_tokenizer(copy_to_local(model_cfg.input_tokenizer), trust_remote_code=trust)
            # re-tokenizing with the reward model's chat template is only needed when the two tokenizers differ
            same = input_tokenizer.get_vocab() == self.tokenizer.get_vocab() and (
                input_tokenizer.chat_template == self.tokenizer.chat_template
            )
            self.input_tokenizer = None if same else input_tokenizer
        files.hf_config.classifier_dropout = 0.0
        self.reward_module = build_fsdp_model(
            AutoModelForTokenClassification,
            files,
            strategy=self.config.strategy,
            fsdp_config=model_cfg.fsdp_config,
            device_mesh=self.device_mesh,
            trainable=False,
            trust_remote_code=trust,
            cpu_offload=True,
        )

    @register(dispatch_mode=Dispatch.DP_COMPUTE_PROTO)
    @compute_phase
    @reports_compute_time
    def compute_rm_score(self, data: DataProto) -> DataProto:
        """``rm_scores`` ``(bs, response_length)``: the model's score at the last valid token, zeros elsewhere."""
        from verl.workers.engine.fsdp.hf_forward import score_sequences
        from verl.workers.roles.reward_model import switch_chat_template

        if self.input_tokenizer is not None:
            inputs = switch_chat_template(data, self.input_tokenizer, self.tokenizer, self.config)
        else:
            inputs = data.batch
        max_tokens = self.config.forward_max_token_len_per_gpu if self.config.use_dynamic_bsz else None
        scores = score_sequences(self.reward_module, inputs, self.micro_batch_size or len(data), max_tokens)
        response_length = data.batch["responses"].shape[-1]
        attention_mask = data.batch["attention_mask"]
        position_ids = data.batch["position_ids"]
        last = torch.argmax(position_ids * attention_mask, dim=-1)
        token_level = torch.zeros_like(attention_mask, dtype=scores.dtype)
        token_level[torch.arange(len(data)), last] = scores
        return DataProto.from_dict({"rm_scores": token_level[:, -response_length:]}).to("cpu")
