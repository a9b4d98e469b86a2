"""`RaySPINTrainer`: SPIN as online DPO on top of `RayPPOTrainer`.

One step: sample ``rollout.n`` responses per prompt (the PPO generate phase), score them (the reward phase), pair
each prompt's best response with its worst (prompts whose responses all score the same give none), compute the
reference's log-probs of the paired responses (the ref phase), take a DPO step on the actor, and every
``trainer.ref_update_freq`` steps make the reference the current actor: the policy then plays against its latest
self. No critic, no advantages.
"""

from __future__ import annotations

import logging

import numpy as np
import torch

from recipe.spin.core_algos import select_preference_pairs
from verl import DataProto
from verl.trainer.ppo.metric_utils import _compute_response_info
from verl.trainer.ppo.ray_trainer import RayPPOTrainer
from verl.trainer.ppo.reward import PendingReward
from verl.trainer.ppo.validation import dump_rollout
from verl.utils.debug import marked_timer

logger = logging.getLogger(__name__)

__all__ = ["RaySPINTrainer", "build_pair_batch", "spin_data_metrics"]

_PAIR_KEYS = ["prompts", "responses", "input_ids", "attention_mask", "position_ids", "response_mask"]


def build_pair_batch(batch: DataProto, pairs: list[tuple[int, int]], world_size: int) -> DataProto:
    """The rows of ``pairs`` as ``[chosen_0, rejected_0, chosen_1, ...]``, padded to whole pairs per rank.

    The data-parallel split gives each rank ``len / world_size`` consecutive rows, so the pair count is padded to a
    multiple of ``world_size`` by repeating pairs with ``dpo_weight`` 0 (they run forward and backward, as every
    rank must, but add nothing to the loss). ``meta_info["num_pairs"]`` is the number of real pairs.
    """
    if not pairs:
        raise ValueError("build_pair_batch needs at least one pair")
    padding = -len(pairs) % world_size
    padded = pairs + [pairs[i % len(pairs)] for i in range(padding)]
    rows = [row for pair in padded for row in pair]
    keys = [k for k in _PAIR_KEYS if k in batch.batch.keys()]
    pair_batch = batch.select(batch_keys=keys, non_tensor_batch_keys=[]).select_idxs(rows)
    weight = torch.zeros(len(rows), dtype=torch.float32)
    weight[: 2 * len(pairs)] = 1.0
    pair_batch.batch["dpo_weight"] = weight
    pair_batch.meta_info = {
        "num_pairs": len(pairs),
        "global_token_num": torch.sum(pair_batch.batch["attention_mask"], dim=-1).tolist(),
    }
    return pair_batch


def spin_data_metrics(batch: DataProto) -> dict[str, float]:
    """Score and length statistics of all sampled responses (``critic/score/*`` as in PPO, so the run report and
    the benchmarks read the same keys)."""
    info = _compute_response_info(batch)
    response_width = batch.batch["responses"].shape[-1]
    prompt_width = batch.batch["attention_mask"].shape[-1] - response_width
    metrics = {}
    columns = {
        "critic/score": batch.batch["token_level_scores"].sum(-1),
        "response_length": info["response_length"],
        "prompt_length": info["prompt_length"],
    }
    for prefix, values in columns.items():
        values = values.float()
        metrics.update(
            {
                f"{prefix}/mean": values.mean().item(),
                f"{prefix}/max": values.max().item(),
                f"{prefix}/min": values.min().item(),
            }
        )
    metrics["response_length/clip_ratio"] = torch.eq(info["response_length"], response_width).float().mean().item()
    metrics["prompt_length/clip_ratio"] = torch.eq(info["prompt_length"], prompt_width).float().mean().item()
    return metrics


class RaySPINTrainer(RayPPOTrainer):
    """Online DPO with a periodically refreshed reference. Needs the policy worker to be
    ``recipe.spin.fsdp_workers.SPINActorRolloutRefWorker`` (it holds the reference and the refresh); reads
    ``trainer.ref_update_freq`` and ``algorithm.pair_selection``."""

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        # the reference lives in the policy worker: the ref phase calls actor_rollout_wg, no separate ref group
        self.ref_in_actor = True
        self.use_critic = False

    # ------------------------------------------------------------------------------------------------ phases
    def _score(self, batch: DataProto, reward: PendingReward) -> DataProto:
        """Write ``token_level_scores`` (= ``token_level_rewards``: no KL in the reward) and the reward's extras."""
        reward_tensor, extra_infos = reward.result()
        batch.batch["token_level_scores"] = reward_tensor
        batch.batch["token_level_rewards"] = reward_tensor
        if extra_infos:
            batch.non_tensor_batch.update({k: np.array(v) for k, v in extra_infos.items()})
        batch.meta_info["reward_extra_keys"] = list(extra_infos or {})
        return batch

    def _make_pairs(self, batch: DataProto, metrics: dict) -> DataProto | None:
        """The DPO batch of this step, or None when no prompt had responses that scored differently."""
        selection = self.ppo_config.algorithm.pair_selection
        scores = batch.batch["token_level_scores"].sum(-1)
        uids = batch.non_tensor_batch["uid"]
        pairs = select_preference_pairs(scores, uids, selection.strategy, selection.min_score_gap)
        num_prompts = len(set(uids.tolist()))
        metrics["spin/num_pairs"] = len(pairs)
        metrics["spin/prompts_with_pair"] = len({uids[c] for c, _ in pairs}) / num_prompts
        if not pairs:
            logger.warning("step %d: no prompt has responses with different scores; no DPO update", self.global_steps)
            return None
        gaps = torch.stack([scores[c] - scores[r] for c, r in pairs]).float()
        metrics["spin/score_gap/mean"] = gaps.mean().item()
        return build_pair_batch(batch, pairs, self.actor_rollout_wg.world_size)

    def _should_refresh_reference(self) -> bool:
        freq = self.ppo_config.trainer.ref_update_freq
        return freq > 0 and self.global_steps % freq == 0

    def _refresh_reference(self) -> None:
        """The reference becomes the current actor (in every worker, shard by shard)."""
        self.actor_rollout_wg.update_reference_policy()

    # --------------------------------------------------------------------------------------------------- loop
    def train_step(self, batch: DataProto, timing_raw: dict) -> tuple[DataProto, dict]:
        """One SPIN step on a batch of prompts; returns the sampled batch and the step's metrics."""
        metrics: dict = {}
        batch = self._generate(batch, timing_raw)
        batch.meta_info["global_token_num"] = torch.sum(batch.batch["attention_mask"], dim=-1).tolist()
        with marked_timer("reward", timing_raw):
            batch, reward = self._compute_reward(batch, timing_raw)
            batch = self._score(batch, reward)
        pair_batch = self._make_pairs(batch, metrics)
        if pair_batch is not None:
            with marked_timer("ref", timing_raw):
                pair_batch = self._compute_ref_log_prob(pair_batch, timing_raw)
            with marked_timer("update_actor", timing_raw):
                self._update_actor(pair_batch, metrics, timing_raw)
        if self._should_refresh_reference():
            with marked_timer("update_ref", timing_raw):
                self._refresh_reference()
        dump_dir = self.ppo_config.trainer.rollout_data_dir
        if dump_dir:
            with marked_timer("dump_rollout_generations", timing_raw):
                dump_rollout(batch, batch.meta_info["reward_extra_keys"], self.tokenizer, dump_dir, self.global_steps)
        return batch, metrics

    def _step_metrics(self, batch: DataProto, timing_raw: dict) -> dict:
        """PPO's timing and throughput metrics with SPIN's data metrics (there are no advantages or values)."""
        from verl.trainer.ppo.metric_utils import compute_throughout_metrics, compute_timing_metrics
        from verl.utils.device import peak_rss_gb

        metrics = spin_data_metrics(batch)
        metrics.update(compute_timing_metrics(batch=batch, timing_raw=timing_raw))
        n_gpus = self.resource_pool_manager.get_n_gpus()
        metrics.update(compute_throughout_metrics(batch=batch, timing_raw=timing_raw, n_gpus=n_gpus))
        metrics["perf/peak_rss_gb/trainer"] = peak_rss_gb()
        return metrics

    def _load_checkpoint(self) -> int:
        """Resume the actor as PPO does; the reference, which checkpoints do not hold, is refreshed from it."""
        step = super()._load_checkpoint()
        freq = self.ppo_config.trainer.ref_update_freq
        if step > 0 and freq > 0:
            if step % freq:
                logger.warning(
                    "resumed at step %d, between reference refreshes (trainer.ref_update_freq=%d): the reference is "
                    "the step-%d actor instead of the step-%d one",
                    step,
                    freq,
                    step,
                    step - step % freq,
                )
            self._refresh_reference()
        return step
