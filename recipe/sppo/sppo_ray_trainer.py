"""``RaySPPOTrainer``: the PPO trainer with SPPO's advantage step (``s - SoftMean_beta(s)`` over the batch)."""

from __future__ import annotations

from recipe.sppo.config_check import check_sppo_config
from recipe.sppo.sppo_core import seq_level_rewards, sppo_advantages
from verl import DataProto
from verl.trainer.ppo.ray_trainer import RayPPOTrainer
from verl.trainer.ppo.reward import PendingReward

__all__ = ["RaySPPOTrainer"]


class RaySPPOTrainer(RayPPOTrainer):
    """SPPO on the PPO trainer: every phase is the parent's except the advantage step.

    Use it with ``recipe.sppo.sppo_worker.SPPOActorRolloutRefWorker`` (whose process registers the ``sppo`` loss)
    and the ``sppo_trainer`` config (``adv_estimator: null``, ``policy_loss.loss_mode: sppo``).
    """

    def _validate_config(self) -> None:
        check_sppo_config(self.ppo_config, check_paths=False, check_device=False)

    def _compute_advantage(self, batch: DataProto, reward: PendingReward | None, metrics: dict) -> DataProto:
        """``seq_level_rewards`` ``(bs,)`` = s - SoftMean_beta(s), beta = ``algorithm.sppo_eta``; ``advantages``
        and ``returns`` ``(bs, response_length)`` carry it on each response token (the loss reads it there)."""
        if reward is not None:
            batch = self._store_reward(batch, reward)
        batch = self._apply_kl_in_reward(batch, metrics)
        rewards = seq_level_rewards(batch.batch["token_level_rewards"], float(self.ppo_config.algorithm.sppo_eta))
        mask = batch.batch["response_mask"]
        if self.ppo_config.actor_rollout_ref.rollout.uses_agent_loops:
            mask = batch.batch["loss_mask"][:, -mask.shape[-1] :]  # tool output earns no reward
        batch.batch["seq_level_rewards"] = rewards
        batch.batch["advantages"] = sppo_advantages(rewards, mask)
        batch.batch["returns"] = batch.batch["advantages"]
        return batch
