"""RayPRIMETrainer: PPO with an online implicit process reward model (PRIME), on RayPPOTrainer's phases.

A step: generate for ``train_batch_size * oversample_factor`` prompts, verify every response (``acc``), keep the
``train_batch_size`` prompts that pass the accuracy (and truncation) filter first, then the usual log-prob phases;
in the advantage phase the PRM is updated and scores the responses, and the PRIME advantage combines its dense
rewards with the verifier's outcome.
"""

from __future__ import annotations

import numpy as np
import torch
from omegaconf import DictConfig, open_dict

from recipe.prime.prime_config import PrimeDataSettings, PrimeRewardModelSettings, prime_algorithm_coefs
from recipe.prime.prime_core_algos import compute_prime_advantage_return, outcome_reward_tensor
from verl import DataProto
from verl.trainer.ppo.metric_utils import reduce_metrics
from verl.trainer.ppo.ray_trainer import RayPPOTrainer, pop_worker_timing
from verl.trainer.ppo.reward import PendingReward
from verl.utils.debug import marked_timer

__all__ = ["RayPRIMETrainer", "prompt_groups", "select_prompts"]


def prompt_groups(uid) -> list[np.ndarray]:
    """Row indices of each prompt's responses, prompts in order of first appearance."""
    uid = np.asarray(uid, dtype=object)
    _, first, inverse = np.unique(uid.astype(str), return_index=True, return_inverse=True)
    order = np.argsort(first)  # unique() sorts by value; keep the batch's order instead
    return [np.flatnonzero(inverse == g) for g in order]


def select_prompts(
    acc: torch.Tensor, response_length: torch.Tensor, uid, settings: PrimeDataSettings
) -> tuple[np.ndarray, np.ndarray]:
    """Rows to train on and the per-prompt filter verdicts.

    acc, response_length: ``(bs,)`` per response. A prompt passes unless (``filter_accuracy``) the mean acc of its
    responses is outside ``[accuracy_lower_bound, accuracy_upper_bound]`` or (``filter_truncate``) one of them
    reached ``max_response_length``. Passing prompts come first (each group in batch order), then the others;
    the first ``train_batch_size`` prompts are kept. Returns (row indices, bool per prompt in batch order).
    """
    groups = prompt_groups(uid)
    passed = np.ones(len(groups), dtype=bool)
    for g, rows in enumerate(groups):
        if settings.filter_accuracy:
            mean = float(acc[rows].float().mean())
            passed[g] &= settings.accuracy_lower_bound <= mean <= settings.accuracy_upper_bound
        if settings.filter_truncate:
            passed[g] &= int(response_length[rows].max()) < settings.max_response_length
    order = np.argsort(~passed, kind="stable")[: settings.train_batch_size]
    return np.concatenate([groups[g] for g in order]), passed


def group_broadcast(values: torch.Tensor, uid) -> torch.Tensor:
    """``(bs, n)``: for each row, ``values`` of every row of its prompt group (groups of equal size ``n``)."""
    out = torch.empty(len(values), 0)
    for rows in prompt_groups(uid):
        if out.shape[1] == 0:
            out = torch.zeros(len(values), len(rows), dtype=values.dtype)
        out[torch.as_tensor(rows)] = values[torch.as_tensor(rows)].unsqueeze(0).expand(len(rows), -1)
    return out


class RayPRIMETrainer(RayPPOTrainer):
    """PRIME trainer; ``role_worker_mapping[Role.RewardModel]`` is the PRIME reward-model worker and ``reward_fn``
    the ``prime`` reward manager (its ``verify`` writes ``acc``)."""

    def _create_dataloader(self, train_dataset, val_dataset, collate_fn, train_sampler) -> None:
        self.prime_data = PrimeDataSettings.from_config(self.ppo_config)
        self.rm_settings = PrimeRewardModelSettings.from_config(self.ppo_config.reward_model)
        self.reward_dpo_coef, self.reward_gt_coef = prime_algorithm_coefs(self.ppo_config)
        # oversampling: the dataloader (and the rollout's cache sizing) see the larger generation batch
        self.ppo_config.data.gen_batch_size = self.prime_data.generation_batch_size
        super()._create_dataloader(train_dataset, val_dataset, collate_fn, train_sampler)
        # the PRM's schedule spans the run as the actor's does
        total = self.total_training_steps
        optim_nodes = [self.ppo_config.reward_model.model.optim]
        if isinstance(self.config, DictConfig):
            optim_nodes.append(self.config.reward_model.model.optim)
        for node in optim_nodes:
            with open_dict(node):
                node.total_training_steps = total
        self.rm_settings.optim.total_training_steps = total

    # -------------------------------------------------------------------------------------------------- phases
    def train_step(self, batch: DataProto, timing_raw: dict) -> tuple[DataProto, dict]:
        """Generate for the oversampled prompts, verify and down-sample, then the PPO phases."""
        metrics: dict = {}
        batch = self._generate(batch, timing_raw)
        with marked_timer("verify", timing_raw):
            batch = self._verify_and_filter(batch, metrics)
        self._balance_and_count_tokens(batch, metrics)
        with marked_timer("reward", timing_raw):
            batch, reward = self._compute_reward(batch, timing_raw)
        return self._train_on_rollouts(batch, reward, metrics, timing_raw), metrics

    def _verify_and_filter(self, batch: DataProto, metrics: dict) -> DataProto:
        """Score every response with the verifier (``acc``), log accuracy metrics, keep ``train_batch_size``
        prompts (filter-passing first)."""
        self.reward_fn.verify(batch)
        acc = batch.batch["acc"]
        response_length = batch.batch["response_mask"].sum(-1)
        rows, passed = select_prompts(acc, response_length, batch.non_tensor_batch["uid"], self.prime_data)
        prompt_acc = np.array([float(acc[g].mean()) for g in prompt_groups(batch.non_tensor_batch["uid"])])
        metrics.update(
            {
                "batch/acc": float(acc.float().mean()),
                "batch/solve_none": float((prompt_acc == 0).mean()),
                "batch/solve_all": float((prompt_acc == 1).mean()),
                "batch/filter_pass_ratio": float(passed.mean()),
            }
        )
        return batch[torch.as_tensor(rows)]

    def _compute_reward(self, batch: DataProto, timing_raw: dict) -> tuple[DataProto, PendingReward]:
        """The outcome reward: ``acc`` (already verified) at each response's last token. The PRM runs in the
        advantage phase, where it is updated too."""
        reward = outcome_reward_tensor(batch.batch["acc"], batch.batch["response_mask"])
        return batch, PendingReward(value=(reward, {}))

    def _compute_advantage(self, batch: DataProto, reward: PendingReward, metrics: dict) -> DataProto:
        """Update and run the PRM (as ``reward_model.model.update`` says), then the PRIME advantage."""
        reward_tensor, _ = reward.result()
        batch.batch["token_level_scores"] = reward_tensor
        batch.batch["token_level_rewards"] = reward_tensor
        batch = self._run_reward_model(batch, metrics)
        advantages, returns = compute_prime_advantage_return(
            batch.batch["rm_scores"],
            batch.batch["acc"],
            batch.batch["response_mask"],
            batch.non_tensor_batch["uid"],
            self.reward_dpo_coef,
            self.reward_gt_coef,
        )
        batch.batch["advantages"], batch.batch["returns"] = advantages, returns
        return batch

    def _run_reward_model(self, batch: DataProto, metrics: dict) -> DataProto:
        """``rm_scores`` from the PRM: ``none`` scores only; ``after`` updates and keeps the training forward's
        scores; ``before`` updates, then scores with the new weights."""
        timing: dict = {}
        update = self.rm_settings.update
        batch.meta_info["rollout_n"] = self.ppo_config.actor_rollout_ref.rollout.n
        if update != "none" and self.rm_settings.loss_type == "dpo":
            # the pairwise loss compares each response with its group: their (pre-update) sums of q, detached
            pre = pop_worker_timing(self.rm_wg.compute_rm_score(batch), timing)
            uid = batch.non_tensor_batch["uid"]
            batch.batch["Q_bc"] = group_broadcast(pre.batch["q"].sum(-1), uid)
            batch.batch["acc_bc"] = group_broadcast(batch.batch["acc"].float(), uid)
        if update == "none":
            output = self.rm_wg.compute_rm_score(batch)
        else:
            output = self.rm_wg.update_rm(batch)
            metrics.update(reduce_metrics(output.meta_info.pop("metrics")))
            if update == "before":
                output = self.rm_wg.compute_rm_score(batch)
        pop_worker_timing(output, timing)
        batch.batch["rm_scores"] = output.batch["rm_scores"]
        return batch

    def _extra_checkpoint_groups(self) -> dict:
        """The PRM (weights, optimizer, schedule) is saved in ``global_step_N/reward`` and restored on resume."""
        return {"reward": self.rm_wg}
