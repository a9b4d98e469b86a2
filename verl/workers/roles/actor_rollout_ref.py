"""The actor / rollout / reference worker: one process of the policy, each role wired to a training engine.

The trainer calls its ``@register``ed methods through worker groups. The policy's model, optimizer, offloading,
checkpoints and forwards are the engine's (``actor_rollout_ref.actor.strategy`` picks it, see
:func:`verl.workers.engine.get_engine_cls`); the PPO update is :class:`verl.workers.actor.PPOActor` over it; sampling
is the rollout's (HF or vLLM), with the engine handing its weights over around each generation.

Ulysses sequence parallelism (``ulysses_sequence_parallel_size`` = sp > 1) is the engine's: the dispatch stays per
rank (DP_COMPUTE_PROTO, one chunk per worker); the engine gathers the chunks of an SP group so its ranks work on the
same rows, each on a slice of every packed sequence, and hands each rank its own rows' results back for the collect.
Batch sizes are per dp rank (``workers / sp``).
"""

from __future__ import annotations

import threading
import time
from contextlib import contextmanager, nullcontext

import numpy as np
import torch
import torch.distributed as dist
from omegaconf import DictConfig

from verl import DataProto
from verl.single_controller.base import Worker
from verl.single_controller.base.decorator import Dispatch, register
from verl.utils.debug import DistProfilerExtension
from verl.utils.device import get_device_id, get_device_name, peak_rss_gb
from verl.utils.distributed import init_distributed
from verl.utils.import_utils import import_external_libs
from verl.workers.config import ActorRolloutRefConfig
from verl.workers.config.batch_sizes import normalize_actor_batch_sizes
from verl.workers.engine import get_engine_cls
from verl.workers.engine.pretrained import load_pretrained
from verl.workers.roles.base import mfu_metric, role_profiler, typed_section
from verl.workers.roles.phases import compute_phase, reports_compute_time

__all__ = ["ActorRolloutRefWorker", "AsyncActorRolloutRefWorker"]

device_name = get_device_name()

_ROLES = ("actor", "rollout", "ref", "actor_rollout", "actor_rollout_ref")


class ActorRolloutRefWorker(Worker, DistProfilerExtension):
    """One process of the policy: trains it (actor), samples from it (rollout), and/or scores with a frozen copy
    (ref). ``config`` is the ``actor_rollout_ref`` section."""

    def __init__(self, config: ActorRolloutRefConfig | DictConfig, role: str):
        Worker.__init__(self)
        assert role in _ROLES, f"role must be one of {_ROLES}, got {role!r}"
        self.config = config = typed_section(config, ActorRolloutRefConfig)
        self.role = role
        self._is_actor = role in ("actor", "actor_rollout", "actor_rollout_ref")
        self._is_rollout = role in ("rollout", "actor_rollout", "actor_rollout_ref")
        self._is_ref = role in ("ref", "actor_rollout_ref")
        self._is_lora = config.model.is_lora
        init_distributed(timeout_s=config.nccl_timeout)
        if role != "rollout":  # a standalone rollout (main_generation) neither trains nor computes log-probs
            normalize_actor_batch_sizes(config, dist.get_world_size()).apply_to(config)
        # the engines read these from their own section: the actor's are its keys (by default the model's, as in
        # verl 0.9); the reference's, which has none in the YAML, are copied from the model's
        config.ref.use_remove_padding = config.model.use_remove_padding
        config.ref.use_fused_kernels = config.model.use_fused_kernels
        # a reference group and a rollout-only group are profiled as their own sections say; a group that trains (the
        # hybrid engine's rollout included) as the actor's does
        section = role if role in ("ref", "rollout") else "actor"
        DistProfilerExtension.__init__(self, role_profiler(self, config[section].profiler, role=section))
        self.actor = self.rollout = self.ref_policy = None
        self.actor_engine = self.ref_engine = None
        self.rollout_sharding_manager = None
        self.processor = None
        # a rollout on workers of its own (hybrid_engine=False): no training engine, weights from the checkpoint
        # engine; main_generation's role="rollout" keeps the hybrid layout (a frozen copy handed to the rollout)
        self._standalone = role == "rollout" and not config.hybrid_engine
        self._standalone_rollout = None
        self.checkpoint_engine = None
        self.weight_version = -1  # the version of the weights this worker generates with; -1: the checkpoint's own
        self._weight_gate = None  # partial rollout (enable_partial_rollout): weight loads pause the generations
        # generate_sequences calls on several threads (a standalone rollout's Ray actor with max_concurrency > 1) run
        # one at a time unless the rollout serves concurrent calls itself (the agent-loop rollout's shared batcher)
        self._generate_lock = threading.Lock()

    @property
    def actor_module(self) -> torch.nn.Module:
        """The policy the actor trains and the rollout samples from (a standalone HF rollout's own model)."""
        if self._standalone:
            return self._standalone_rollout.module
        return self.actor_engine.module

    # ------------------------------------------------------------------------------------------ model building
    def _load_files(self):
        """The policy's files (local folder, tokenizer, HF config, processor), kept on the worker."""
        model_cfg = self.config.model
        files = load_pretrained(
            model_cfg.path,
            use_shm=model_cfg.use_shm,
            trust_remote_code=model_cfg.trust_remote_code,
            tokenizer_path=model_cfg.tokenizer_path,
            hf_config_path=model_cfg.hf_config_path,
            override_config=model_cfg.override_config,
            chat_template=model_cfg.custom_chat_template,
        )
        self.tokenizer, self.local_path, self.hf_config = files.tokenizer, files.local_path, files.hf_config
        self._files = files
        self.processor = files.processor  # vision-language models: saved with checkpoints
        return files

    def _build_engine(self, role: str):
        """The engine of ``role`` ("actor", "rollout" or "ref"), from the policy's files."""
        files = self._load_files()
        section, key = (self.config.ref, "ref") if role == "ref" else (self.config.actor, "actor")
        engine_cls = get_engine_cls(section.strategy, f"actor_rollout_ref.{key}.strategy")
        return engine_cls.build(role, self.config, files)

    def _build_rollout(self):
        name = self.config.rollout.name
        if name in ("hf", "naive"):
            from verl.workers.rollout import HFRollout, NaiveRollout

            rollout_cls = HFRollout if name == "hf" else NaiveRollout
            # the HF rollout samples from an HF model: the engine's own (FSDP, no hand-off) or one it keeps current
            module, handoff = self.actor_engine.hf_rollout_module()
            return rollout_cls(module, self.config.rollout), handoff
        if name == "vllm":
            from torch.distributed.device_mesh import init_device_mesh

            from verl.workers.rollout.vllm_rollout import vLLMRollout

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
                tokenizer_path=self._files.tokenizer_path,
                hf_config_path=self._files.hf_config_path,
            )
            handoff = self.actor_engine.rollout_weight_handoff(
                rollout, self.hf_config, self.config.rollout, rollout_mesh
            )
            return rollout, handoff
        # the driver's config check refuses sglang (and any other name) before Ray starts; this guards direct callers
        raise ValueError(f"actor_rollout_ref.rollout.name={name!r} is not supported here; expected hf or vllm")

    @register(dispatch_mode=Dispatch.ONE_TO_ALL)
    def init_model(self):
        """Build the models this role needs (actor + optimizer, rollout engine, reference)."""
        from verl.workers.actor import PPOActor

        import_external_libs(self.config.model.external_lib)
        if self._standalone:
            from verl.workers.rollout.standalone import build_standalone_rollout

            self._standalone_rollout = build_standalone_rollout(self.config, self._load_files())
            self.rollout = self._standalone_rollout.rollout
            self.rollout_sharding_manager = self._standalone_rollout.sharding_manager
            if self.config.rollout.uses_agent_loops:
                from verl.multi_turn import AgentLoopRollout

                self.rollout = AgentLoopRollout(self.rollout, self.config.rollout, self.tokenizer)
            return
        if self._is_actor or self._is_rollout:
            self.actor_engine = self._build_engine("actor" if self._is_actor else "rollout")
            if self._is_actor:
                self.actor = PPOActor(self.config.actor, self.actor_engine)
                from verl.utils.flops_counter import FlopsCounter

                self.flops_counter = FlopsCounter(self.hf_config)
        if self._is_rollout:
            self.rollout, self.rollout_sharding_manager = self._build_rollout()
            if self.config.rollout.uses_agent_loops:
                from verl.multi_turn import AgentLoopRollout

                self.rollout = AgentLoopRollout(self.rollout, self.config.rollout, self.tokenizer)
        if self._is_ref:
            self.ref_engine = self._build_engine("ref")
            self.ref_policy = PPOActor(self.config.ref, self.ref_engine)

    def _resident(self, with_optimizer: bool = False):
        """The policy on the device for the block (a reference-only worker has none to bring back)."""
        return self.actor_engine.resident(with_optimizer) if self.actor_engine is not None else nullcontext()

    # ------------------------------------------------------------------------------------------------ methods
    @register(dispatch_mode=Dispatch.DP_COMPUTE_PROTO)
    @compute_phase
    def generate_sequences(self, prompts: DataProto) -> DataProto:
        """Sample responses for left-padded prompts (n per prompt, interleaved)."""
        assert self._is_rollout, f"generate_sequences needs a rollout role, this worker is {self.role!r}"
        if self._standalone:
            generation_config = self._standalone_rollout.generation_config
            if self._standalone_rollout.needs_weights:
                raise RuntimeError(
                    f"this standalone rollout started with dummy weights (actor_rollout_ref.rollout.load_format="
                    f"{self.config.rollout.load_format!r}): sync weights (send_weights / receive_weights) before "
                    "generating, or load real ones (load_format=auto)"
                )
        else:
            generation_config = getattr(self.actor_module, "generation_config", None)
        eos = getattr(generation_config, "eos_token_id", None) if generation_config is not None else None
        prompts.meta_info["eos_token_id"] = eos if eos is not None else self.tokenizer.eos_token_id
        prompts.meta_info["pad_token_id"] = self.tokenizer.pad_token_id
        start = time.perf_counter()
        manager = self.rollout_sharding_manager or nullcontext()
        concurrent = getattr(self.rollout, "concurrent_generation", False) and self.rollout_sharding_manager is None
        with nullcontext() if concurrent else self._generate_lock, self._resident(), manager:
            reshard = getattr(manager, "timing", {}).get("reshard", time.perf_counter() - start)
            if self.rollout_sharding_manager is not None:
                prompts = self.rollout_sharding_manager.preprocess_data(prompts)
            chunk = prompts.meta_info.get("generation_chunk", 0)  # the reward loop generates a batch in chunks
            # calls that overlap others (meta_info["concurrent_generation"]) draw from the process's RNG stream: a
            # per-call seed would reset the global RNG under the other calls' feet
            seeded = not (concurrent and prompts.meta_info.get("concurrent_generation"))
            with self._sampling_seed(prompts.meta_info.get("global_steps", 0), chunk) if seeded else nullcontext():
                output = self.rollout.generate_sequences(prompts=prompts)
            if self.rollout_sharding_manager is not None:
                output = self.rollout_sharding_manager.postprocess_data(output)
        output.meta_info["timing"] = {"generate_sequences": time.perf_counter() - start, "reshard": reshard}
        if self._standalone:  # which policy generated each sample, for the trainer's staleness checks
            version = np.full(len(output), self.weight_version, dtype=np.int64)
            token_versions = output.batch.get("weight_versions") if output.batch is not None else None
            if token_versions is not None:  # partial rollout: a sample is as old as its oldest sampled token
                sampled = token_versions >= 0
                oldest = torch.where(sampled, token_versions, torch.iinfo(torch.long).max).min(dim=1).values
                version = np.where(sampled.any(dim=1).numpy(), oldest.numpy(), version)
            output.non_tensor_batch["weight_version"] = version
            output.meta_info["weight_version"] = int(version.min()) if len(version) else self.weight_version
        return output.to("cpu")

    @contextmanager
    def _sampling_seed(self, global_step: int, chunk: int = 0):
        """Seed sampling from (rollout.seed, step, rank, chunk), so a resumed run draws exactly the samples an
        uninterrupted one would, whatever else used the global RNG in between, and each chunk of a batch generated in
        several calls draws its own. The global RNG stream is restored afterwards."""
        on_device = device_name != "cpu"
        devices = [get_device_id()] if on_device else []
        with torch.random.fork_rng(devices=devices, device_type=device_name if on_device else "cuda"):
            base = self.config.rollout.seed
            torch.manual_seed((base * 1_000_003 + int(global_step)) * 65_537 + self.rank + int(chunk) * 1_000_000_007)
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
        with self._resident(), adapter_off:
            log_probs, entropys = self.actor.compute_log_prob(data=data, calculate_entropy=True)
        output = DataProto.from_dict(
            {"old_log_probs": log_probs, "entropys": entropys},
            meta_info={"temperature": self.config.rollout.temperature},
        )
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
        log_probs, _ = self.ref_policy.compute_log_prob(data=data, calculate_entropy=False)
        return DataProto.from_dict({"ref_log_prob": log_probs}).to("cpu")

    @register(dispatch_mode=Dispatch.DP_COMPUTE_PROTO)
    @compute_phase
    @reports_compute_time
    def update_actor(self, data: DataProto) -> DataProto:
        """One PPO update over ``data``; returns ``meta_info["metrics"]`` (lists per key)."""
        assert self._is_actor, f"update_actor needs the actor role, this worker is {self.role!r}"
        data = data.to("cpu")
        with self._resident(with_optimizer=True):
            start = time.perf_counter()
            metrics = self.actor.update_policy(data=data)
            elapsed = time.perf_counter() - start
            metrics["perf/mfu/actor"] = (
                mfu_metric(self.flops_counter, data.meta_info.get("global_token_num", []), elapsed, self.world_size)
                * self.config.actor.ppo_epochs
            )
            metrics["actor/lr"] = self.actor_engine.lr()
            metrics["perf/peak_rss_gb/worker"] = peak_rss_gb()
            metrics["perf/cpu_threads/actor"] = torch.get_num_threads()
            self.actor_engine.lr_scheduler_step()
        return DataProto(meta_info={"metrics": metrics})

    # ------------------------------------------------------------------------------------------ checkpoint engine
    @register(dispatch_mode=Dispatch.ONE_TO_ALL)
    def checkpoint_engine_address(self) -> tuple[str, int]:
        """The address and port of the checkpoint-engine rendezvous that actor rank 0 hosts (the driver takes rank
        0's answer). Rank 0 binds it here, before the port is handed out, so nothing can take the port in between."""
        from verl.checkpoint_engine.collective import host_rendezvous
        from verl.single_controller.base.worker import WorkerHelper

        address = WorkerHelper._get_node_ip()
        if self._is_actor and self.rank == 0:
            return address, host_rendezvous(address)
        return address, 0

    @register(dispatch_mode=Dispatch.ONE_TO_ALL, blocking=False)
    def init_checkpoint_engine(
        self, master_addr: str, master_port: int, world_size: int, rank_offset: int, backend: str | None = None
    ) -> None:
        """Join the weight-transfer group: actor rank 0 is transfer rank 0 (the sender, hosting the rendezvous at
        ``master_addr:master_port``), rollout rank r is transfer rank ``rank_offset + r``; ``world_size`` = 1 + the
        rollout workers. Other actor ranks take part in the gathers of :meth:`send_weights` but send nothing.

        Non-blocking: the actor's and the rollout's calls must be in flight together (collect both futures).
        ``backend`` overrides ``rollout.checkpoint_engine.backend``: a driver whose worker groups all run in its own
        process (the in-process worker group) passes ``"local"``, since its calls run one after the other."""
        from verl.checkpoint_engine import build_checkpoint_engine

        if self._is_actor:
            if self.rank != 0:
                return None
            if rank_offset != 0:
                raise ValueError(f"init_checkpoint_engine: the actor sends from transfer rank 0, got {rank_offset=}")
        elif not self._standalone:
            raise RuntimeError(
                f"init_checkpoint_engine needs the actor role or a standalone rollout (role='rollout' with "
                f"actor_rollout_ref.hybrid_engine=False); this worker is {self.role!r}"
            )
        settings = self.config.rollout.checkpoint_engine
        self.checkpoint_engine = build_checkpoint_engine(
            backend or settings.backend,
            rank_offset + self.rank,
            world_size,
            settings.update_weights_bucket_megabytes,
            settings.engine_kwargs,
            settings.custom_backend_module,
        )
        self.checkpoint_engine.connect(master_addr, master_port)
        return None

    @register(dispatch_mode=Dispatch.ONE_TO_ALL, blocking=False)
    def send_weights(self, version: int):
        """Send the actor's current weights, tagged ``version``, to the rollout workers (a collective over the actor
        ranks, which gather each tensor; rank 0 sends). Returns rank 0's :class:`~verl.checkpoint_engine.SyncStats`
        (None on the other ranks). Non-blocking: collect it with the rollout's :meth:`receive_weights`."""
        assert self._is_actor, f"send_weights needs the actor role, this worker is {self.role!r}"
        with self._resident(), torch.no_grad():
            weights = self.actor_engine.hf_weights()
            if self.checkpoint_engine is None:
                if self.rank == 0:
                    raise RuntimeError("send_weights before init_checkpoint_engine")
                for _ in weights:  # the gathers are collectives: take part, keep nothing
                    pass
                return None
            stats = self.checkpoint_engine.send_weights(weights, version)
        self.weight_version = int(version)
        return stats

    @register(dispatch_mode=Dispatch.ONE_TO_ALL, blocking=False)
    def receive_weights(self):
        """Receive a weight transfer into the rollout engine; later generations carry its version in
        ``non_tensor_batch["weight_version"]``. Returns this rank's :class:`~verl.checkpoint_engine.SyncStats`."""
        assert self._standalone, f"receive_weights needs a standalone rollout, this worker is {self.role!r}"
        if self.checkpoint_engine is None:
            raise RuntimeError("receive_weights before init_checkpoint_engine")

        def load() -> int:
            self._standalone_rollout.load_weights(self.checkpoint_engine.receive_weights())
            self.weight_version = self.checkpoint_engine.version
            return self.weight_version

        if self._weight_gate is None:
            load()
        else:  # partial rollout: the generations in flight pause at their next decode step and resume after it

            def load_released() -> int:
                with self._standalone_rollout.rollout.weights_released():  # into the originals, not cast copies
                    return load()

            self._weight_gate.swap(load_released)
        return self.checkpoint_engine.last_stats

    @register(dispatch_mode=Dispatch.ONE_TO_ALL)
    def enable_partial_rollout(self) -> None:
        """Let :meth:`receive_weights` run while a generation is in flight (on a thread of its own: a Ray actor with
        ``max_concurrency`` >= 2): it pauses the generation after its current decode step, loads the weights, and the
        generation resumes under them; responses then carry ``weight_versions`` ``(bs, response_length)``, the
        version that sampled each token (-1 where none was sampled). The HF and vLLM rollouts (vLLM: the engine's
        unfinished requests are aborted at a step and resubmitted as prompt + tokens so far)."""
        from verl.workers.rollout.weight_gate import WeightGate

        assert self._standalone, f"partial rollout needs a standalone rollout, this worker is {self.role!r}"
        engine = self._standalone_rollout.rollout
        if not hasattr(engine, "gate"):
            raise ValueError(
                f"partial rollout pauses the rollout's decode loop; actor_rollout_ref.rollout.name="
                f"{self.config.rollout.name!r} cannot be paused mid-generation: use rollout.name=hf or vllm, or "
                "async_training.partial_rollout=False"
            )
        self._weight_gate = engine.gate = WeightGate(self.weight_version)

    @register(dispatch_mode=Dispatch.ONE_TO_ALL)
    def close_checkpoint_engine(self) -> None:
        """Leave the weight-transfer group."""
        if self.checkpoint_engine is not None:
            self.checkpoint_engine.finalize()
            self.checkpoint_engine = None

    @register(dispatch_mode=Dispatch.ONE_TO_ALL)
    def save_checkpoint(self, local_path, hdfs_path=None, global_step=0, max_ckpt_to_keep=None):
        """Save this rank's shard of model / optimizer / extra state under ``local_path``."""
        assert self._is_actor, f"save_checkpoint needs the actor role, this worker is {self.role!r}"
        self.actor_engine.save_checkpoint(
            local_path=local_path, hdfs_path=hdfs_path, global_step=global_step, max_ckpt_to_keep=max_ckpt_to_keep
        )

    @register(dispatch_mode=Dispatch.ONE_TO_ALL)
    def load_checkpoint(self, local_path, hdfs_path=None, del_local_after_load=False):
        """Restore this rank's shard saved by :meth:`save_checkpoint`."""
        assert self._is_actor or self._is_rollout, f"load_checkpoint: role {self.role!r} holds no checkpoint"
        if self._standalone:
            raise RuntimeError(
                "a standalone rollout (actor_rollout_ref.hybrid_engine=False) holds no checkpoint: resume the actor, "
                "then send its weights (send_weights / receive_weights)"
            )
        self.actor_engine.load_checkpoint(
            local_path=local_path, hdfs_path=hdfs_path, del_local_after_load=del_local_after_load
        )


class AsyncActorRolloutRefWorker(ActorRolloutRefWorker):
    """The actor-rollout worker for ``rollout.mode=async``.

    Its rollout runs agent loops (``init_model`` builds it, as for ``multi_turn.enable``); with vLLM each turn is a
    request of its own on the worker's engine, continuously batched. The trainer calls ``generate_sequences`` as in
    sync mode, and the weight hand-off around it is the same, so no separate server process is needed.
    """
