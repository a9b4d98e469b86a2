"""The PPO-family trainer: a single controller that drives actor, rollout, reference, critic and reward workers.

``RayPPOTrainer.fit`` reads as the algorithm: generate, score, recompute log-probs, reference, values, advantages,
update critic, update actor. Each phase is one method; recipes subclass the trainer and override phases.
"""

from __future__ import annotations

import contextlib
import logging
import os
import uuid
from copy import deepcopy

import numpy as np
import torch
from omegaconf import DictConfig, open_dict

from verl import DataProto
from verl.multi_turn.rollout import pop_agent_loop_metrics
from verl.single_controller.base import Worker
from verl.single_controller.ray import RayClassWithInitArgs, RayResourcePool, RayWorkerGroup
from verl.single_controller.ray.base import create_colocated_worker_cls
from verl.trainer.config import PPOConfig
from verl.trainer.config.trainer import apply_global_profiler, profile_steps
from verl.trainer.ppo import core_algos
from verl.trainer.ppo.checkpoint_callback import build_checkpoint_callback
from verl.trainer.ppo.checkpointing import CheckpointSaveError, TrainerCheckpointer
from verl.trainer.ppo.core_algos import AdvantageEstimator, apply_kl_penalty, compute_advantage, compute_response_mask
from verl.trainer.ppo.losses import agg_loss
from verl.trainer.ppo.metric_utils import (
    compute_data_metrics,
    compute_throughout_metrics,
    compute_timing_metrics,
    reduce_metrics,
)
from verl.trainer.ppo.mfu import PhaseMFU
from verl.trainer.ppo.resources import ResourcePoolManager, Role
from verl.trainer.ppo.reward import PendingReward, compute_reward, reward_source_metrics, submit_reward
from verl.trainer.ppo.reward_loop import ROW_KEY, RewardLoop, generation_chunk_prompts, streams_trajectories
from verl.trainer.ppo.rollout_corr_helper import (
    compute_token_version_metrics,
    rejection_enabled,
    rollout_correction,
    rollout_correction_kwargs,
)
from verl.trainer.ppo.validation import Validator, dump_rollout, keep_generation_inputs, pop_generation_inputs
from verl.trainer.ppo.weight_sync import WeightSync
from verl.utils.debug import marked_timer
from verl.utils.device import peak_rss_gb
from verl.utils.seqlen_balancing import get_seqlen_balanced_partitions, log_seqlen_unbalance
from verl.workers.config.critic import critic_enabled

logger = logging.getLogger(__name__)

WorkerType = type[Worker]

__all__ = [
    "AdvantageEstimator",
    "RayPPOTrainer",
    "ResourcePoolManager",
    "Role",
    "WorkerType",
    "apply_kl_penalty",
    "compute_advantage",
    "compute_response_mask",
]


_A, _R, _C = "actor_rollout_ref.actor", "actor_rollout_ref.rollout", "critic"
# the settings that lower each phase's memory, named when a worker is lost (killed for memory) during it
MEMORY_HINTS: dict[str, list[str]] = {
    "init_model": [f"{_A}.fsdp_config.param_offload=True", f"{_A}.fsdp_config.optimizer_offload=True"],
    "generate_sequences": [
        f"{_R}.gpu_memory_utilization",
        f"{_R}.max_num_batched_tokens",
        f"{_R}.n or data.train_batch_size",
        "data.max_response_length",
    ],
    "compute_log_prob": [f"{_R}.log_prob_micro_batch_size_per_gpu", f"{_R}.log_prob_max_token_len_per_gpu"],
    "compute_ref_log_prob": [
        "actor_rollout_ref.ref.log_prob_micro_batch_size_per_gpu",
        "actor_rollout_ref.ref.fsdp_config.param_offload=True",
    ],
    "compute_values": [f"{_C}.forward_micro_batch_size_per_gpu", f"{_C}.forward_max_token_len_per_gpu"],
    "compute_rm_score": ["reward_model.micro_batch_size_per_gpu", "reward_model.forward_max_token_len_per_gpu"],
    "update_actor": [
        f"{_A}.ppo_micro_batch_size_per_gpu",
        f"{_A}.ppo_max_token_len_per_gpu (with use_dynamic_bsz)",
        "actor_rollout_ref.model.enable_gradient_checkpointing=True",
        f"{_A}.fsdp_config.optimizer_offload=True",
    ],
    "update_critic": [
        f"{_C}.ppo_micro_batch_size_per_gpu",
        f"{_C}.ppo_max_token_len_per_gpu (with use_dynamic_bsz)",
        f"{_C}.model.enable_gradient_checkpointing=True",
        f"{_C}.model.fsdp_config.optimizer_offload=True",
    ],
    "save_checkpoint": [f"{_A}.checkpoint.save_contents without hf_model"],
}


def pop_worker_timing(output: DataProto, timing_raw: dict) -> DataProto:
    """Move the seconds a worker reported (``meta_info["timing"]``) into ``timing_raw``."""
    timing_raw.update(output.meta_info.pop("timing", {}))
    return output


class RayPPOTrainer:
    """Drives PPO, GRPO, RLOO, REINFORCE++, ReMax, ... over Ray (or in-process) worker groups.

    ``config`` is the composed ``ppo_trainer`` config. It stays available as ``self.config`` (verl's attribute,
    which recipes read); the trainer itself reads ``self.ppo_config``, the typed `PPOConfig` built from it once
    here. Checkpointing and validation are the collaborators ``self.checkpointer`` and ``self.validator``.
    """

    def __init__(
        self,
        config,
        tokenizer,
        role_worker_mapping: dict[Role, WorkerType],
        resource_pool_manager: ResourcePoolManager,
        ray_worker_group_cls: type[RayWorkerGroup] = RayWorkerGroup,
        processor=None,
        reward_fn=None,
        val_reward_fn=None,
        train_dataset=None,
        val_dataset=None,
        collate_fn=None,
        train_sampler=None,
        device_name: str = "cuda",
    ):
        self.config = config
        self.ppo_config = cfg = PPOConfig.from_config(config)
        apply_global_profiler(cfg)
        self.tokenizer = tokenizer
        self.processor = processor
        self.reward_fn = reward_fn
        self.val_reward_fn = val_reward_fn
        self.hybrid_engine = cfg.actor_rollout_ref.hybrid_engine
        needed = [Role.ActorRollout] if self.hybrid_engine else [Role.Actor, Role.Rollout]
        assert all(role in role_worker_mapping for role in needed), (
            f"role_worker_mapping needs {needed} (actor_rollout_ref.hybrid_engine={self.hybrid_engine}), "
            f"got {list(role_worker_mapping)}"
        )
        self.role_worker_mapping = role_worker_mapping
        self.resource_pool_manager = resource_pool_manager
        self.ray_worker_group_cls = ray_worker_group_cls
        self.device_name = device_name
        self.use_reference_policy = Role.RefPolicy in role_worker_mapping
        self.use_rm = Role.RewardModel in role_worker_mapping
        self.ref_in_actor = cfg.actor_rollout_ref.model.is_lora
        if cfg.algorithm.use_kl_in_reward:
            self.kl_ctrl_in_reward = core_algos.get_kl_controller(cfg.algorithm.kl_ctrl)
        # every registered estimator but GAE is critic-free (a recipe's own advantage step is too), unless
        # critic.enable says otherwise
        self.use_critic = critic_enabled(cfg.critic, cfg.algorithm.adv_estimator)
        self._validate_config()
        self._create_dataloader(train_dataset, val_dataset, collate_fn, train_sampler)
        rollout = cfg.actor_rollout_ref.rollout
        if rollout.kv_cache_sequences is None:
            rollout_world = cfg.trainer.world_size if self.hybrid_engine else cfg.rollout.world_size
            prompts_per_rank = -(-cfg.data.generation_batch_size // rollout_world)
            rollout.kv_cache_sequences = prompts_per_rank * rollout.n
        self.checkpointer = TrainerCheckpointer(cfg.trainer)
        self.checkpoint_callback = build_checkpoint_callback(config, cfg.trainer.checkpoint_callback_class)
        self.max_steps_duration = 0.0  # the longest step so far, for trainer.esi_redundant_time
        self.validator = Validator(cfg, tokenizer, self.val_dataloader, val_reward_fn)

    # --------------------------------------------------------------------------------------------------- setup
    def _validate_config(self) -> None:
        """The checks of ``check_ppo_config`` that need no files or devices (main_ppo ran the rest already);
        a recipe with an advantage step of its own (SPPO: ``adv_estimator: null``) overrides this."""
        from verl.trainer.config.checks.ppo import check_ppo_config

        estimator = self.ppo_config.algorithm.adv_estimator
        if estimator not in core_algos.ADV_ESTIMATOR_REGISTRY:
            raise NotImplementedError(f"algorithm.adv_estimator={estimator!r} is not a registered estimator")
        check_ppo_config(
            self.ppo_config,
            check_paths=False,
            check_device=False,
            extra_adv_estimators=tuple(core_algos.ADV_ESTIMATOR_REGISTRY),
        )

    def _create_dataloader(self, train_dataset, val_dataset, collate_fn, train_sampler) -> None:
        from torch.utils.data import DataLoader

        from verl.utils.dataset.dataloader import StatefulDataLoader
        from verl.utils.dataset.rl_dataset import collate_fn as default_collate_fn
        from verl.utils.dataset.rl_dataset import create_rl_dataset, create_rl_sampler

        data = self.ppo_config.data
        if train_dataset is None:
            train_dataset = create_rl_dataset(
                data.train_files, data, self.tokenizer, self.processor, data.train_max_samples
            )
        if val_dataset is None:
            val_dataset = create_rl_dataset(data.val_files, data, self.tokenizer, self.processor, data.val_max_samples)
        self.train_dataset, self.val_dataset = train_dataset, val_dataset
        if train_sampler is None:
            train_sampler = create_rl_sampler(data, train_dataset)
        collate_fn = collate_fn or default_collate_fn
        batch_size = data.generation_batch_size
        if len(train_dataset) < batch_size:
            raise ValueError(
                f"data.train_batch_size={batch_size} is larger than the training set ({len(train_dataset)} prompts "
                f"after filtering, from {data.train_files})"
            )
        self.train_dataloader = StatefulDataLoader(
            dataset=train_dataset,
            batch_size=batch_size,
            num_workers=data.dataloader_num_workers,
            drop_last=True,
            collate_fn=collate_fn,
            sampler=train_sampler,
        )
        self.val_dataloader = DataLoader(
            dataset=val_dataset,
            batch_size=data.val_batch_size or len(val_dataset),
            num_workers=data.dataloader_num_workers,
            shuffle=data.validation_shuffle,
            drop_last=False,
            collate_fn=collate_fn,
        )
        assert len(self.train_dataloader) >= 1, "the training dataloader is empty"
        assert len(self.val_dataloader) >= 1, "the validation dataloader is empty"
        trainer = self.ppo_config.trainer
        total = trainer.total_training_steps or len(self.train_dataloader) * trainer.total_epochs
        self.total_training_steps = total
        # the workers' schedulers need it, the console line's ETA too; recipes read it from self.config as in verl
        trainer.total_training_steps = total
        self.ppo_config.actor_rollout_ref.actor.optim.total_training_steps = total
        self.ppo_config.critic.optim.total_training_steps = total
        if isinstance(self.config, DictConfig):
            with open_dict(self.config):
                self.config.trainer.total_training_steps = total
                self.config.actor_rollout_ref.actor.optim.total_training_steps = total
                self.config.critic.optim.total_training_steps = total

    def init_workers(self) -> None:
        """Create the resource pools and the (colocated) worker groups, then build the models."""
        self.resource_pool_manager.create_resource_pool()
        pool_to_classes: dict[RayResourcePool, dict[str, RayClassWithInitArgs]] = {
            pool: {} for pool in self.resource_pool_manager.resource_pool_dict.values()
        }

        def add(which: Role, key: str, **init_kwargs):
            pool = self.resource_pool_manager.get_resource_pool(which)
            pool_to_classes[pool][key] = RayClassWithInitArgs(cls=self.role_worker_mapping[which], **init_kwargs)

        policy = self.ppo_config.actor_rollout_ref
        if self.hybrid_engine:
            add(Role.ActorRollout, "actor_rollout", config=policy, role="actor_rollout")
        else:  # the rollout on a pool of its own; weights reach it through the checkpoint engine
            add(Role.Actor, "actor", config=policy, role="actor")
            add(Role.Rollout, "rollout", config=policy, role="rollout")
        if self.use_critic:
            add(Role.Critic, "critic", config=self.ppo_config.critic)
        if self.use_reference_policy:
            add(Role.RefPolicy, "ref", config=self.ppo_config.actor_rollout_ref, role="ref")
        if self.use_rm:
            add(Role.RewardModel, "rm", config=self.ppo_config.reward_model)

        wg_kwargs = {}
        wg_kwargs["ray_wait_register_center_timeout"] = self.ppo_config.trainer.ray_wait_register_center_timeout
        all_wg = {}
        for pool, class_dict in pool_to_classes.items():
            if not class_dict:
                continue
            worker_dict_cls = create_colocated_worker_cls(class_dict=class_dict)
            worker_dict_cls.update_options(self._worker_actor_options(set(class_dict)))
            wg_dict = self.ray_worker_group_cls(
                resource_pool=pool, ray_cls_with_init=worker_dict_cls, device_name=self.device_name, **wg_kwargs
            )
            all_wg.update(wg_dict.spawn(prefix_set=class_dict.keys()))

        self._watchdog = watchdog = self._make_watchdog()
        for group in all_wg.values():
            group.set_watchdog(watchdog)
        # the rollout engine is built last so it sizes its cache after the other models are resident
        if self.use_critic:
            self.critic_wg = all_wg["critic"]
            self.critic_wg.init_model()
        if self.use_reference_policy and not self.ref_in_actor:
            self.ref_policy_wg = all_wg["ref"]
            self.ref_policy_wg.init_model()
        if self.use_rm:
            self.rm_wg = all_wg["rm"]
            self.rm_wg.init_model()
        if self.hybrid_engine:
            self.actor_rollout_wg = self.rollout_wg = all_wg["actor_rollout"]
            self.actor_rollout_wg.init_model()
        else:
            # verl's attribute names: actor_rollout_wg stays the group that trains (recipes and checkpoints use it)
            self.actor_rollout_wg = self.actor_wg = all_wg["actor"]
            self.rollout_wg = all_wg["rollout"]
            self.actor_wg.init_model()
            self.rollout_wg.init_model()
            self.weight_sync = WeightSync(self.actor_wg, self.rollout_wg)
        # async mode: the workers' rollout plays agent loops (see AsyncActorRolloutRefWorker); called the same way
        self.async_rollout_mode = self.ppo_config.actor_rollout_ref.rollout.mode == "async"

    def _worker_actor_options(self, roles: set[str]) -> dict:
        """Extra Ray actor options for the workers of a pool holding ``roles`` (a recipe may need more).

        A CPU run with the rollout on a pool of its own: the actor's and the rollout's processes share the host's
        cores, so each takes its share of all of them (``VERL_HOST_WORKERS``), not of its own group's only: two
        groups of one process each on 2 cores would otherwise run 2 threads each, 4 on 2 cores."""
        host_workers = self.host_worker_processes()
        return {"runtime_env": {"env_vars": {"VERL_HOST_WORKERS": str(host_workers)}}} if host_workers else {}

    def host_worker_processes(self) -> int | None:
        """The worker processes that share one host's cores on a single-node CPU run with a standalone rollout
        (the actor's pool and the rollout's); None otherwise (each group's share of the host is its own)."""
        from verl.utils.device import is_accelerator_available

        cfg = self.ppo_config
        if self.hybrid_engine or is_accelerator_available() or cfg.trainer.nnodes != 1 or cfg.rollout.nnodes != 1:
            return None
        return cfg.trainer.n_gpus_per_node + cfg.rollout.n_gpus_per_node

    def _make_watchdog(self):
        """Deadlines of the worker-group calls (``trainer.watchdog_*``), stacks written under the run directory; a
        worker lost during a phase is reported with the settings that lower that phase's memory."""
        from verl.single_controller.base.watchdog import Watchdog

        trainer = self.ppo_config.trainer
        return Watchdog(
            timeout_s=trainer.watchdog_timeout_s,
            phase_timeout_s=dict(trainer.watchdog_phase_timeout_s or {}),
            dump_dir=os.path.join(os.path.abspath(trainer.default_local_dir), "watchdog"),
            memory_hints=MEMORY_HINTS,
        )

    # ------------------------------------------------------------------------------------------------ phases
    def _generate(self, batch: DataProto, timing_raw: dict) -> DataProto:
        """Sample ``rollout.n`` responses per prompt and merge them (interleaved) into the repeated batch; with the
        reward loop (``reward_model.use_reward_loop``) each trajectory (agent loops, vLLM) or generated chunk (HF) is
        scored as it finishes."""
        reward_loop = self._reward_loop()
        if reward_loop is None:
            return self._generate_once(batch, timing_raw)
        rollout = self.ppo_config.actor_rollout_ref.rollout
        if streams_trajectories(rollout):
            return self._generate_once(batch, timing_raw, reward_loop)
        chunk = generation_chunk_prompts(rollout, self.rollout_wg.world_size, len(batch))
        return reward_loop.generate(batch, timing_raw, self._generate_once, chunk)

    def _reward_loop(self) -> RewardLoop | None:
        """The run's reward loop with ``reward_model.use_reward_loop`` (None without, or with a reward-model worker,
        whose scores the reward function reads after the whole batch)."""
        if not self.ppo_config.reward_model.use_reward_loop or self.use_rm or self.reward_fn is None:
            return None
        if getattr(self, "_reward_loop_instance", None) is None:
            from verl.single_controller.inprocess import InProcessWorkerGroup

            remote = not isinstance(self.rollout_wg, InProcessWorkerGroup)  # Ray workers reach it through a Ray queue
            workers = self.ppo_config.reward_model.num_workers
            self._reward_loop_instance = RewardLoop(self.reward_fn, remote=remote, workers=workers)
        return self._reward_loop_instance

    def _generate_once(self, batch: DataProto, timing_raw: dict, stream: RewardLoop | None = None) -> DataProto:
        """`_generate` in one call to the rollout workers; with ``stream`` the rollout hands each trajectory to that
        reward loop as it finishes."""
        gen_batch = self._pop_generation_inputs(batch)
        gen_batch.meta_info["global_steps"] = self.global_steps
        self._sync_rollout_weights(timing_raw)
        if stream is not None:
            n = self.ppo_config.actor_rollout_ref.rollout.n
            ids = stream.open_stream(batch, gen_batch, n, lambda p, g, out: self._merge_generation(p, g, out, 1))
        try:
            with marked_timer("gen", timing_raw):
                gen_output = pop_worker_timing(self.rollout_wg.generate_sequences(gen_batch), timing_raw)
        finally:
            if stream is not None:
                stream.close_stream(gen_batch)
        if self.ppo_config.algorithm.adv_estimator == AdvantageEstimator.REMAX:
            with marked_timer("gen_max", timing_raw):
                batch.batch["reward_baselines"] = self._greedy_baseline(batch, gen_batch)
        batch = self._merge_generation(batch, gen_batch, gen_output)
        if stream is not None:
            if len(ids) != len(batch):
                raise RuntimeError(f"the rollout returned {len(batch)} rows for {len(ids)} expected trajectories")
            batch.non_tensor_batch[ROW_KEY] = ids
        return batch

    def _merge_generation(
        self, batch: DataProto, gen_batch: DataProto, gen_output: DataProto, repeat: int | None = None
    ) -> DataProto:
        """The prompts' batch, repeated ``repeat`` (default ``rollout.n``) times (interleaved), with ``gen_output``
        (the responses to ``gen_batch``, popped from it) and a ``uid`` per prompt."""
        batch.non_tensor_batch["uid"] = np.array([str(uuid.uuid4()) for _ in range(len(batch))], dtype=object)
        keep_generation_inputs(batch, gen_batch, gen_output)
        n = self.ppo_config.actor_rollout_ref.rollout.n if repeat is None else repeat
        batch = batch.repeat(repeat_times=n, interleave=True)
        batch = batch.union(gen_output)
        batch.batch["response_mask"] = compute_response_mask(batch)
        return batch

    def _pop_generation_inputs(self, batch: DataProto) -> DataProto:
        return pop_generation_inputs(batch, row_context=self.ppo_config.actor_rollout_ref.rollout.uses_agent_loops)

    def _greedy_baseline(self, batch: DataProto, gen_batch: DataProto) -> torch.Tensor:
        """ReMax: the reward of the greedy response to each prompt, ``(bs,)``."""
        baseline_batch = deepcopy(gen_batch)
        baseline_batch.meta_info["do_sample"] = False
        baseline_out = self.rollout_wg.generate_sequences(baseline_batch)
        scored = deepcopy(batch).union(baseline_out)
        reward_tensor, _ = compute_reward(scored, self.reward_fn)
        return reward_tensor.sum(dim=-1)

    def _balance_batch(self, batch: DataProto, metrics: dict, logging_prefix: str = "global_seqlen") -> None:
        """Reorder rows so each data-parallel rank gets about the same number of tokens."""
        attention_mask = batch.batch["attention_mask"]
        seqlens = attention_mask.view(attention_mask.shape[0], -1).sum(-1).tolist()
        world_size = self.actor_rollout_wg.world_size
        partitions = get_seqlen_balanced_partitions(seqlens, k_partitions=world_size, equal_size=True)
        batch.reorder(torch.tensor([i for partition in partitions for i in partition]))
        metrics.update(log_seqlen_unbalance(seqlen_list=seqlens, partitions=partitions, prefix=logging_prefix))

    def _compute_reward(self, batch: DataProto, timing_raw: dict) -> tuple[DataProto, PendingReward]:
        """Reward-model scores (if any), then the rule reward, computed now or (launch_reward_fn_async) in a Ray
        task that overlaps the log-prob phases; with the reward loop, the rows' reward already being scored."""
        if ROW_KEY in batch.non_tensor_batch:  # reward loop: waited for where the rewards are read
            return batch, self._reward_loop().pending(batch.non_tensor_batch.pop(ROW_KEY))
        if self.use_rm:
            batch = batch.union(pop_worker_timing(self.rm_wg.compute_rm_score(batch), timing_raw))
        launch_async = self.ppo_config.reward_model.launch_reward_fn_async
        with self._driver_phase("compute_reward"):
            return batch, submit_reward(batch, self.reward_fn, self.ppo_config, self.tokenizer, launch_async)

    def _driver_phase(self, phase: str):
        """The watchdog's deadline for a phase the driver runs itself (the reward); none before ``init_workers``."""
        watchdog = getattr(self, "_watchdog", None)
        return watchdog.in_process(phase, who="driver") if watchdog is not None else contextlib.nullcontext()

    def _needs_old_log_prob(self) -> bool:
        """Whether the update needs the old log-probs from a pass of their own.

        One on-policy update (one epoch over one mini batch) gets them from its own forward instead, which gives the
        same gradient (see ``DataParallelPPOActor.update_policy``). The in-reward KL penalty and the rollout
        probability probe (``rollout.calculate_log_probs``) need them before the update; a recipe that does too
        overrides this.
        """
        cfg = self.ppo_config
        actor = cfg.actor_rollout_ref.actor
        on_policy = actor.ppo_epochs == 1 and actor.ppo_mini_batch_size >= cfg.data.train_batch_size
        return not on_policy or cfg.algorithm.use_kl_in_reward or cfg.actor_rollout_ref.rollout.calculate_log_probs

    def _compute_old_log_prob(self, batch: DataProto, metrics: dict, timing_raw: dict) -> DataProto:
        if self.ppo_config.algorithm.rollout_correction.bypass_mode:
            # bypass mode: the rollout's log-probs are the old ones (two policies), no recompute
            if "rollout_log_probs" not in batch.batch.keys():
                raise KeyError(
                    "algorithm.rollout_correction.bypass_mode=True but the rollout returned no rollout_log_probs; "
                    "set actor_rollout_ref.rollout.calculate_log_probs=True"
                )
            batch.batch["old_log_probs"] = batch.batch["rollout_log_probs"].clone()
            return batch
        if not self._needs_old_log_prob():
            return batch
        old_log_prob = pop_worker_timing(self.actor_rollout_wg.compute_log_prob(batch), timing_raw)
        entropys = old_log_prob.batch.pop("entropys")
        actor = self.ppo_config.actor_rollout_ref.actor
        entropy = agg_loss(entropys, batch.batch["response_mask"], actor.loss_agg_mode, actor.loss_scale_factor)
        metrics["actor/entropy"] = entropy.item()
        batch = batch.union(old_log_prob)
        if "rollout_log_probs" in batch.batch.keys():
            metrics.update(self._rollout_probs_diff(batch))
        return batch

    def _apply_rollout_correction(self, batch: DataProto, metrics: dict) -> DataProto:
        """Decoupled rollout correction (``algorithm.rollout_correction``): IS weights ``pi_old / pi_rollout`` as
        ``rollout_is_weights`` and the rejected tokens taken out of ``response_mask``, once per batch; the mismatch
        metrics (``rollout_corr/...``) whenever the batch has both log-probs. Bypass mode corrects in the actor."""
        keys = batch.batch.keys()
        correction = self.ppo_config.algorithm.rollout_correction
        if correction.bypass_mode or "rollout_log_probs" not in keys or "old_log_probs" not in keys:
            return batch
        response_mask = batch.batch["response_mask"]
        valid = self._rollout_compared_mask(batch)
        weights, kept, corr_metrics = rollout_correction(
            batch.batch["old_log_probs"],
            batch.batch["rollout_log_probs"],
            valid,
            **rollout_correction_kwargs(correction),
        )
        metrics.update(corr_metrics)
        if weights is not None:
            batch.batch["rollout_is_weights"] = weights
        if rejection_enabled(correction):
            # kept is `valid` less the rejected tokens; the rest of response_mask (tool tokens) is left as it was
            batch.batch["response_mask"] = response_mask * (1 - (valid - kept))
        return batch

    def _rollout_compared_mask(self, batch: DataProto) -> torch.Tensor:
        """The response tokens that have a rollout log-prob: all of them, or only the generated ones (multi-turn:
        tool, user and template tokens carry -1), ``(bs, response_length)``."""
        response_mask = batch.batch["response_mask"]
        if self.ppo_config.actor_rollout_ref.rollout.uses_agent_loops:
            return response_mask * batch.batch["loss_mask"][:, -response_mask.size(1) :]
        return response_mask

    def _rollout_probs_diff(self, batch: DataProto) -> dict:
        """How far the rollout engine's sampling probabilities are from the actor's recomputed ones."""
        mask = self._rollout_compared_mask(batch).bool()
        diff = torch.abs(torch.exp(batch.batch["rollout_log_probs"]) - torch.exp(batch.batch["old_log_probs"]))
        diff = diff[mask]
        return {
            "training/rollout_probs_diff_max": diff.max().item(),
            "training/rollout_probs_diff_mean": diff.mean().item(),
            "training/rollout_probs_diff_std": diff.std().item(),
        }

    def _compute_ref_log_prob(self, batch: DataProto, timing_raw: dict) -> DataProto:
        group = self.actor_rollout_wg if self.ref_in_actor else self.ref_policy_wg
        return batch.union(pop_worker_timing(group.compute_ref_log_prob(batch), timing_raw))

    def _compute_values(self, batch: DataProto, timing_raw: dict) -> DataProto:
        return batch.union(pop_worker_timing(self.critic_wg.compute_values(batch), timing_raw))

    def _store_reward(self, batch: DataProto, reward: PendingReward) -> DataProto:
        """Wait for ``reward`` and put it on the batch: ``token_level_scores`` and one array per extra-info key."""
        with self._driver_phase("compute_reward"):
            reward_tensor, reward_extra_infos = reward.result()
        batch.batch["token_level_scores"] = reward_tensor
        if reward_extra_infos:
            batch.non_tensor_batch.update({k: np.array(v) for k, v in reward_extra_infos.items()})
        batch.meta_info["reward_extra_keys"] = list(reward_extra_infos or {})
        return batch

    def _compute_advantage(self, batch: DataProto, reward: PendingReward | None, metrics: dict) -> DataProto:
        """In-reward KL (if on), then the advantage estimator; ``reward=None``: the scores are on the batch already
        (a recipe that scored before filtering, see ``_store_reward``)."""
        if reward is not None:
            batch = self._store_reward(batch, reward)
            metrics.update(reward.metrics())  # the reward loop's scoring, overlap and wait seconds
            # reward calls that failed or timed out and scored 0 (a manager reports them per sample)
            metrics["reward/failed_calls"] = int(np.sum(batch.non_tensor_batch.get("reward_call_failed", 0)))
            metrics.update(reward_source_metrics(batch.non_tensor_batch))  # hybrid rewards: reward/<source>/mean
        batch = self._apply_kl_in_reward(batch, metrics)
        algorithm = self.ppo_config.algorithm
        return compute_advantage(
            batch,
            adv_estimator=algorithm.adv_estimator,
            gamma=algorithm.gamma,
            lam=algorithm.lam,
            num_repeat=self.ppo_config.actor_rollout_ref.rollout.n,
            norm_adv_by_std_in_grpo=algorithm.norm_adv_by_std_in_grpo,
            multi_turn=self.ppo_config.actor_rollout_ref.rollout.uses_agent_loops,
            config=algorithm,
        )

    def _apply_kl_in_reward(self, batch: DataProto, metrics: dict) -> DataProto:
        """``token_level_rewards``: the scores, less the in-reward KL penalty when ``algorithm.use_kl_in_reward``."""
        algorithm = self.ppo_config.algorithm
        if algorithm.use_kl_in_reward:
            multi_turn = self.ppo_config.actor_rollout_ref.rollout.uses_agent_loops
            batch, kl_metrics = apply_kl_penalty(batch, self.kl_ctrl_in_reward, algorithm.kl_penalty, multi_turn)
            metrics.update(kl_metrics)
        else:
            batch.batch["token_level_rewards"] = batch.batch["token_level_scores"]
        return batch

    def _update_critic(self, batch: DataProto, metrics: dict, timing_raw: dict) -> None:
        batch.meta_info["global_steps"] = self.global_steps  # named in the workers' non-finite warnings
        output = pop_worker_timing(self.critic_wg.update_critic(batch), timing_raw)
        metrics.update(reduce_metrics(output.meta_info["metrics"]))

    def _update_actor(self, batch: DataProto, metrics: dict, timing_raw: dict) -> None:
        rollout = self.ppo_config.actor_rollout_ref.rollout
        batch.meta_info["multi_turn"] = rollout.uses_agent_loops
        # the temperature the responses were sampled at (the log-prob pass, when there is one, reports the same)
        batch.meta_info["temperature"] = rollout.temperature
        batch.meta_info["global_steps"] = self.global_steps
        correction = self.ppo_config.algorithm.rollout_correction
        if correction.bypass_mode:  # the actor computes the correction from pi_theta / pi_rollout
            batch.meta_info["rollout_correction"] = correction.to_dict()
        output = pop_worker_timing(self.actor_rollout_wg.update_actor(batch), timing_raw)
        metrics.update(reduce_metrics(output.meta_info["metrics"]))

    # --------------------------------------------------------------------------------------------------- loop
    def train_step(self, batch: DataProto, timing_raw: dict) -> tuple[DataProto | None, dict]:
        """One RL step on a batch of prompts; returns the full batch and its metrics.

        A recipe's override may draw more prompts with ``_next_train_batch``; it returns ``(None, metrics)`` when the
        data ran out before it had a batch to update on, which ends ``fit``.
        """
        metrics: dict = {}
        batch = self._generate(batch, timing_raw)
        with marked_timer("train", timing_raw):  # reward to update: what a standalone rollout could overlap
            batch = self._train_on_generated(batch, metrics, timing_raw)
        return batch, metrics

    def _train_on_generated(self, batch: DataProto, metrics: dict, timing_raw: dict) -> DataProto:
        """Everything of a step after generation: agent-loop metrics, balancing, reward, then the updates."""
        metrics.update(pop_agent_loop_metrics(batch))  # the agent loops' turns, tool calls, ... (all ranks)
        self._balance_and_count_tokens(batch, metrics)
        with marked_timer("reward", timing_raw):
            batch, reward = self._compute_reward(batch, timing_raw)
        return self._train_on_rollouts(batch, reward, metrics, timing_raw)

    # ------------------------------------------------------------------------------ standalone rollout's weights
    # The largest staleness (trainer's weight version minus the version that generated a sample) this trainer
    # allows: 0 for the synchronous trainer, whose rollout always has the weights of the last update.
    max_weight_staleness = 0

    def _actor_weight_version(self) -> int:
        """The version of the actor's weights while step ``global_steps`` trains: the number of steps done."""
        return self.global_steps - 1

    def _sync_rollout_weights(self, timing_raw: dict) -> None:
        """Send the actor's weights to a standalone rollout through the checkpoint engine, if it lags behind (the
        hybrid engine hands them over inside the worker); logged as ``timing_s/sync_rollout_weights`` and
        ``checkpoint_engine/*``."""
        if self.hybrid_engine:
            return
        version = self._actor_weight_version()
        if self.weight_sync.version == version:
            return
        with marked_timer("sync_rollout_weights", timing_raw):
            stats = self.weight_sync.send(version)
        self._sync_stats = stats

    def _record_weight_staleness(self, batch: DataProto, metrics: dict) -> None:
        """``training/weight_version_staleness/{max,mean}`` of a standalone rollout's samples; a sample more than
        ``max_weight_staleness`` versions behind the actor stops the run."""
        if self.hybrid_engine:
            return
        versions = batch.non_tensor_batch.get("weight_version")
        if versions is None:
            raise RuntimeError(
                "the standalone rollout returned no non_tensor_batch['weight_version']: the rollout worker does not "
                "tag its samples with the weight version that generated them"
            )
        staleness = self._actor_weight_version() - np.asarray(versions, dtype=np.int64)
        metrics["training/weight_version_staleness/max"] = int(staleness.max())
        metrics["training/weight_version_staleness/mean"] = float(staleness.mean())
        metrics["training/weight_version/min"] = int(np.min(versions))
        if "weight_versions" in batch.batch.keys():  # partial rollout: the version of every sampled token
            metrics.update(
                compute_token_version_metrics(
                    batch.batch["weight_versions"], self._actor_weight_version(), batch.batch["response_mask"]
                )
            )
        if staleness.max() > self.max_weight_staleness or staleness.min() < 0:
            raise RuntimeError(
                f"step {self.global_steps}: samples generated with weight versions {sorted(set(versions.tolist()))} "
                f"while the actor has version {self._actor_weight_version()}; this trainer allows a staleness of "
                f"0..{self.max_weight_staleness}"
            )
        sync = getattr(self, "_sync_stats", None)
        if sync is not None:
            metrics.update({f"checkpoint_engine/{k}": v for k, v in sync.items()})
            self._sync_stats = None

    def _balance_and_count_tokens(self, batch: DataProto, metrics: dict) -> None:
        """Balance the rows across ranks (``trainer.balance_batch``) and record the tokens per row."""
        if self.ppo_config.trainer.balance_batch:
            self._balance_batch(batch, metrics)
        batch.meta_info["global_token_num"] = torch.sum(batch.batch["attention_mask"], dim=-1).tolist()

    def _train_on_rollouts(
        self, batch: DataProto, reward: PendingReward | None, metrics: dict, timing_raw: dict
    ) -> DataProto:
        """The second half of a step, on generated rollouts whose reward is ``reward`` (None: already on the batch):
        old log-probs, reference, values, advantages, critic and actor updates, rollout dump."""
        self._record_weight_staleness(batch, metrics)  # a standalone rollout's samples: which weights made them
        with marked_timer("old_log_prob", timing_raw):
            batch = self._compute_old_log_prob(batch, metrics, timing_raw)
            batch = self._apply_rollout_correction(batch, metrics)
        if self.use_reference_policy:
            with marked_timer("ref", timing_raw):
                batch = self._compute_ref_log_prob(batch, timing_raw)
        if self.use_critic:
            with marked_timer("values", timing_raw):
                batch = self._compute_values(batch, timing_raw)
        with marked_timer("adv", timing_raw):
            batch = self._compute_advantage(batch, reward, metrics)
        if not self._rewards_finite(batch, metrics):
            return batch
        if self.use_critic:
            with marked_timer("update_critic", timing_raw):
                self._update_critic(batch, metrics, timing_raw)
        if self.ppo_config.trainer.critic_warmup <= self.global_steps:
            with marked_timer("update_actor", timing_raw):
                self._update_actor(batch, metrics, timing_raw)
        dump_dir = self.ppo_config.trainer.rollout_data_dir
        if dump_dir:
            with marked_timer("dump_rollout_generations", timing_raw):
                keys = batch.meta_info.get("reward_extra_keys", [])
                dump_rollout(batch, keys, self.tokenizer, dump_dir, self.global_steps)
        return batch

    def _rewards_finite(self, batch: DataProto, metrics: dict) -> bool:
        """Whether every reward is finite; if not, this step's updates are skipped (counted and logged)."""
        scores = batch.batch["token_level_scores"]
        bad_rows = int((~torch.isfinite(scores)).any(dim=-1).sum())
        metrics["training/nonfinite_reward"] = float(bad_rows)
        if bad_rows:
            logger.warning(
                "step %d: %d of %d responses have a non-finite reward; skipping this step's actor and critic updates",
                self.global_steps,
                bad_rows,
                len(batch),
            )
        return bad_rows == 0

    def _check_nonfinite(self, metrics: dict) -> None:
        """Count steps in a row with a skipped (non-finite) update or reward; stop at ``max_consecutive_nonfinite``.

        Raised before the step's checkpoint is saved, so the last checkpoint is the last good one.
        """
        keys = ("actor/nonfinite_skipped", "critic/nonfinite_skipped", "training/nonfinite_reward")
        found = {k: metrics[k] for k in keys if metrics.get(k)}
        self._consecutive_nonfinite = self._consecutive_nonfinite + 1 if found else 0
        limit = self.ppo_config.trainer.max_consecutive_nonfinite
        if limit > 0 and self._consecutive_nonfinite >= limit:
            raise FloatingPointError(
                f"{self._consecutive_nonfinite} steps in a row up to step {self.global_steps} had a non-finite loss, "
                f"gradient norm or reward (this step: {found}; trainer.max_consecutive_nonfinite={limit}). The last "
                f"checkpoint under {self.checkpointer.root} predates them; lower the learning rate "
                "(actor_rollout_ref.actor.optim.lr), check the reward function, or set a tighter grad_clip"
            )

    def fit(self) -> None:
        """The training loop: validate, then train_step per batch with validation and checkpoints as configured."""
        from verl.utils.tracking import Tracking

        trainer_cfg = self.ppo_config.trainer
        self.tracker = Tracking(
            project_name=trainer_cfg.project_name,
            experiment_name=trainer_cfg.experiment_name,
            default_backend=trainer_cfg.logger,
            config=self.ppo_config.to_dict(),
        )
        self.global_steps = 0
        self._consecutive_nonfinite = 0
        self._load_checkpoint()
        if not self.hybrid_engine:  # from scratch both pools load the same files; on resume the actor's are newer
            self.weight_sync.send(self.global_steps)
        reporter = self._make_reporter()
        if self.val_reward_fn is not None and trainer_cfg.val_before_train:
            val_metrics = self._validate()
            assert val_metrics, f"validation returned no metrics: {val_metrics}"
            self.tracker.log(data=val_metrics, step=self.global_steps)
            reporter.on_validation(self.global_steps, val_metrics)
            if trainer_cfg.val_only:
                reporter.finish()
                self.tracker.finish()
                return
        self.global_steps += 1
        last_val_metrics = None
        self._phase_mfu = PhaseMFU.build(self.ppo_config, self.ppo_config.actor_rollout_ref.model.path)
        self._batch_source = self._train_batches()
        for epoch, batch_dict in self._batch_source:
            timing_raw: dict = {}
            is_last_step = self.global_steps >= self.total_training_steps
            self._start_profiling()
            with marked_timer("step", timing_raw):
                batch, metrics = self.train_step(DataProto.from_single_dict(batch_dict), timing_raw)
                if batch is not None:
                    self._check_nonfinite(metrics)
                    val_metrics = self._maybe_validate(is_last_step, timing_raw)
                    if val_metrics:
                        metrics.update(val_metrics)
                        reporter.on_validation(self.global_steps, val_metrics)
                        last_val_metrics = val_metrics
                    self._maybe_save_checkpoint(is_last_step, timing_raw)
                    if self.ppo_config.trainer.on_save_error == "continue":
                        metrics["training/checkpoint_save_failures"] = getattr(self, "checkpoint_save_failures", 0)
            self._stop_profiling()
            self.max_steps_duration = max(self.max_steps_duration, timing_raw.get("step") or 0.0)
            if batch is None:  # the step drew more prompts than were left (dynamic sampling): nothing to log
                logger.warning("training data exhausted within step %d; stopping", self.global_steps)
                break
            metrics.update({"training/global_step": self.global_steps, "training/epoch": epoch})
            metrics.update(self._step_metrics(batch, timing_raw))
            self.tracker.log(data=metrics, step=self.global_steps)
            reporter.on_step(self.global_steps, metrics)
            self.global_steps += 1
            if is_last_step:
                break
        if last_val_metrics:
            logger.warning("final validation metrics: %s", last_val_metrics)
        reporter.finish()
        self.tracker.finish()

    def _train_batches(self):
        """(epoch, batch) pairs from the epoch the (possibly resumed) step falls in to ``total_epochs``."""
        steps_per_epoch = len(self.train_dataloader)
        for epoch in range((self.global_steps - 1) // steps_per_epoch, self.ppo_config.trainer.total_epochs):
            for batch_dict in self.train_dataloader:
                yield epoch, batch_dict

    def _next_train_batch(self) -> DataProto | None:
        """The next batch of prompts from the loop's own source (None when the data is exhausted), for a step that
        needs more prompts than one dataloader batch (DAPO's dynamic sampling). Only valid inside ``fit``."""
        item = next(self._batch_source, None)
        if item is None:
            return None
        return DataProto.from_single_dict(item[1])

    def _step_metrics(self, batch: DataProto, timing_raw: dict) -> dict:
        """Data, timing and throughput metrics of a finished step (verl's names)."""
        metrics = compute_data_metrics(batch=batch, use_critic=self.use_critic)
        metrics.update(compute_timing_metrics(batch=batch, timing_raw=timing_raw))
        n_gpus = self.resource_pool_manager.get_n_gpus()
        metrics.update(compute_throughout_metrics(batch=batch, timing_raw=timing_raw, n_gpus=n_gpus))
        phase_mfu = getattr(self, "_phase_mfu", None)
        if phase_mfu is not None:
            mfu = phase_mfu.metrics(batch, timing_raw)
            metrics.update(mfu)
            if self.ppo_config.trainer.device == "cpu":  # the workers know no CPU peak: their update MFU reads 0
                for role, phase in (("actor", "update_actor"), ("critic", "update_critic")):
                    if f"perf/mfu/{phase}" in mfu:
                        metrics[f"perf/mfu/{role}"] = mfu[f"perf/mfu/{phase}"]
        metrics["perf/peak_rss_gb/trainer"] = peak_rss_gb()
        return metrics

    def _maybe_validate(self, is_last_step: bool, timing_raw: dict) -> dict | None:
        test_freq = self.ppo_config.trainer.test_freq
        if self.val_reward_fn is None or test_freq <= 0:
            return None
        if not (is_last_step or self.global_steps % test_freq == 0):
            return None
        with marked_timer("testing", timing_raw):
            return self._validate()

    def _maybe_save_checkpoint(self, is_last_step: bool, timing_raw: dict) -> None:
        """Save at the last step and every ``save_freq`` steps, and (``save_freq`` > 0) when the instance's deadline
        is near (``trainer.esi_redundant_time``, see ``should_save_ckpt_esi``)."""
        from verl.utils.checkpoint.checkpoint_manager import should_save_ckpt_esi

        trainer = self.ppo_config.trainer
        if trainer.save_freq <= 0:
            return
        deadline = should_save_ckpt_esi(self.max_steps_duration, redundant_time=trainer.esi_redundant_time)
        if is_last_step or self.global_steps % trainer.save_freq == 0 or deadline:
            if deadline:
                logger.warning("saving a checkpoint at step %d: the instance's deadline is near", self.global_steps)
            with marked_timer("save_checkpoint", timing_raw):
                self._save_checkpoint()

    def _profiling_groups(self) -> list:
        groups = [self.actor_rollout_wg]
        for name in ("ref_policy_wg", "critic_wg", "rm_wg") + (() if self.hybrid_engine else ("rollout_wg",)):
            if hasattr(self, name):
                groups.append(getattr(self, name))
        return groups

    def _start_profiling(self) -> None:
        """Open the captures of a profiled step (under ``global_profiler.profile_continuous_steps``, a capture that
        the previous step left open goes on)."""
        steps = profile_steps(self.ppo_config) or []
        if self.global_steps not in steps:
            return
        if self.ppo_config.global_profiler.profile_continuous_steps and self.global_steps - 1 in steps:
            return
        for group in self._profiling_groups():
            group.start_profile()

    def _stop_profiling(self) -> None:
        """Close the captures of a profiled step, unless a continuous capture goes on into the next step; after the
        last profiled step the roles' finish hooks run."""
        steps = profile_steps(self.ppo_config) or []
        if self.global_steps not in steps:
            return
        last = self.global_steps == max(steps) or self.global_steps >= self.total_training_steps
        if self.ppo_config.global_profiler.profile_continuous_steps and self.global_steps + 1 in steps and not last:
            return
        for group in self._profiling_groups():
            group.stop_profile(run_command=last)

    # ------------------------------------------------------------------------------------------ collaborators
    def _validate(self) -> dict:
        """Validation metrics of the current policy (verl's method name; recipes call it)."""
        if not self.hybrid_engine:  # the rollout validates the weights of the step just trained
            self.weight_sync.send_if_behind(self.global_steps)
        return self.validator.validate(self.rollout_wg, self.global_steps)

    def _save_checkpoint(self) -> None:
        """Save and publish the checkpoint of ``global_steps``."""
        critic_wg = self.critic_wg if self.use_critic else None
        extra = self._extra_checkpoint_groups()
        try:
            self.checkpointer.save(self.global_steps, self.actor_rollout_wg, critic_wg, self.train_dataloader, extra)
        except CheckpointSaveError as error:
            if self.ppo_config.trainer.on_save_error != "continue":
                raise
            self.checkpoint_save_failures = getattr(self, "checkpoint_save_failures", 0) + 1
            banner = "!" * 100
            logger.error(
                "\n%s\nCHECKPOINT NOT SAVED, training goes on (trainer.on_save_error=continue; %d failed so far): %s"
                "\n%s",
                banner,
                self.checkpoint_save_failures,
                error,
                banner,
            )
        else:  # the user's hook (trainer.checkpoint_callback_class) sees published checkpoints only
            self.checkpoint_callback.on_save(
                trainer=self,
                global_step=self.global_steps,
                checkpoint_dir=self.checkpointer.step_folder(self.global_steps),
                async_save=False,
            )

    def _load_checkpoint(self) -> int:
        """Resume as ``trainer.resume_mode`` says; sets and returns ``global_steps`` (0: from scratch)."""
        critic_wg = self.critic_wg if self.use_critic else None
        extra = self._extra_checkpoint_groups()
        self.global_steps = self.checkpointer.load(self.actor_rollout_wg, critic_wg, self.train_dataloader, extra)
        return self.global_steps

    def _extra_checkpoint_groups(self) -> dict:
        """``{folder name: worker group}`` a recipe checkpoints with each step and restores on resume."""
        return {}

    def _make_reporter(self):
        """Progress bar with ETA, learning curve and report.md in the experiment folder (``trainer.run_report``)."""
        from verl.trainer.report.run_report import RunReporter

        trainer = self.ppo_config.trainer
        return RunReporter(
            trainer.default_local_dir,
            total_steps=self.total_training_steps,
            enabled=trainer.run_report,
            initial_step=self.global_steps,
            run_name=f"{trainer.project_name}/{trainer.experiment_name}",
        )
