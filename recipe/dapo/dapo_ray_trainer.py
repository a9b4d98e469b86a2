"""``RayDAPOTrainer``: RayPPOTrainer whose step fills its batch by dynamic sampling (``algorithm.filter_groups``).

A step generates ``data.gen_batch_size`` prompts at a time, scores them, keeps the groups whose filter metric varies
and draws the next dataloader batch until ``data.train_batch_size`` prompts are kept; then the first
``train_batch_size * rollout.n`` trajectories go through the usual PPO update (``_train_on_rollouts``).
"""

from __future__ import annotations

import logging

from recipe.dapo.dynamic_sampling import DynamicSampler
from verl import DataProto
from verl.trainer.ppo.ray_trainer import RayPPOTrainer
from verl.utils.debug import marked_timer

logger = logging.getLogger(__name__)

__all__ = ["RayDAPOTrainer"]


class RayDAPOTrainer(RayPPOTrainer):
    """DAPO: dynamic sampling on top of the PPO step; clip-higher, token-mean and the overlong buffer are config."""

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        cfg = self.ppo_config
        filter_cfg = cfg.algorithm.filter_groups
        self.sampler = None
        if filter_cfg.enable:
            self.sampler = DynamicSampler(
                train_batch_size=cfg.data.train_batch_size,
                n=cfg.actor_rollout_ref.rollout.n,
                metric=filter_cfg.metric,
                max_num_gen_batches=filter_cfg.max_num_gen_batches,
                gen_batch_size=cfg.data.generation_batch_size,
            )
        elif cfg.data.generation_batch_size > cfg.data.train_batch_size:
            logger.warning(
                "algorithm.filter_groups.enable=False: only data.train_batch_size=%d of each data.gen_batch_size=%d "
                "prompts are trained on",
                cfg.data.train_batch_size,
                cfg.data.generation_batch_size,
            )

    def _generate_and_score(self, batch: DataProto, timing_raw: dict) -> DataProto:
        """Generate ``rollout.n`` responses per prompt and put their reward on the batch (needed to filter)."""
        batch = self._generate(batch, timing_raw)
        with marked_timer("reward", timing_raw):
            batch, reward = self._compute_reward(batch, timing_raw)
            return self._store_reward(batch, reward)

    def _fill_batch(self, batch: DataProto, metrics: dict, timing_raw: dict) -> DataProto | None:
        """Generate, score and filter dataloader batches, starting with ``batch``, until a training batch is full;
        None if the data runs out first."""
        while True:
            self.sampler.add(self._generate_and_score(batch, timing_raw))
            if self.sampler.full:
                metrics["train/num_gen_batches"] = self.sampler.num_gen_batches
                return self.sampler.take()
            batch = self._next_train_batch()
            if batch is None:
                logger.warning(
                    "data exhausted with %d of %d prompts kept", self.sampler.num_prompts, self.sampler.train_batch_size
                )
                return None

    def train_step(self, batch: DataProto, timing_raw: dict) -> tuple[DataProto | None, dict]:
        """One DAPO step: a batch filled by dynamic sampling, then the PPO update on it."""
        metrics: dict = {}
        if self.sampler is None:
            batch = self._generate_and_score(batch, timing_raw)
            batch = batch.slice(0, self.ppo_config.data.train_batch_size * self.ppo_config.actor_rollout_ref.rollout.n)
            metrics["train/num_gen_batches"] = 1
        else:
            batch = self._fill_batch(batch, metrics, timing_raw)
            if batch is None:
                return None, metrics
        self._balance_and_count_tokens(batch, metrics)
        return self._train_on_rollouts(batch, None, metrics, timing_raw), metrics
