"""The SPIN actor: `DataParallelPPOActor` whose update is the DPO loss on (chosen, rejected) pairs.

It keeps the PPO actor's forward (`_forward_micro_batch`) and optimizer step (`_optimizer_step`); only the loss
differs, so FSDP, remove-padding and offloading behave exactly as in PPO.
"""

from __future__ import annotations

import torch
import torch.distributed as dist

from recipe.spin.core_algos import compute_online_dpo_loss, sequence_log_probs
from verl.protocol import DataProto
from verl.workers.actor.dp_actor import DataParallelPPOActor
from verl.workers.engine.micro_batches import append_metrics, to_device, to_float

__all__ = ["SPINDataParallelPPOActor"]

_SELECT_KEYS = ["responses", "input_ids", "attention_mask", "position_ids", "ref_log_prob", "dpo_weight"]


def _dp_world_size() -> int:
    return dist.get_world_size() if dist.is_initialized() else 1


class SPINDataParallelPPOActor(DataParallelPPOActor):
    """Online-DPO actor. ``config`` is ``actor_rollout_ref.actor`` with SPIN's ``dpo_beta``, ``dpo_loss_type`` and
    ``dpo_label_smoothing``."""

    def update_policy(self, data: DataProto) -> dict[str, list]:
        """One optimizer step per ``ppo_epochs`` over this rank's pairs; returns metric lists.

        batch: rows in pairs, ``2k`` chosen and ``2k+1`` rejected: ``responses``, ``input_ids``, ``attention_mask``,
        ``position_ids``, ``ref_log_prob`` ``(rows, response_length)`` and ``dpo_weight`` ``(rows,)`` (1 for a real
        pair, 0 for the padding that evens the pairs out across ranks). meta_info: ``temperature`` and
        ``num_pairs``, the real pairs over all ranks. The loss is the mean over those pairs: each rank scales its
        weighted sum by ``world_size / num_pairs``, since the data-parallel gradient reduction averages ranks.
        """
        if self.actor_optimizer is None:
            raise RuntimeError("update_policy needs an optimizer: this actor was built as a reference policy")
        with self.engine.training(data) as data:
            return self._update_dpo(data)

    def _update_dpo(self, data: DataProto) -> dict[str, list]:
        cfg = self.config
        if len(data) % 2:
            raise ValueError(f"the DPO batch must hold (chosen, rejected) row pairs; got {len(data)} rows")
        temperature = data.meta_info["temperature"]
        num_pairs = data.meta_info["num_pairs"]
        scale = _dp_world_size() / num_pairs
        # whole pairs per micro batch: ppo_micro_batch_size_per_gpu rows, rounded down to an even number
        rows_per_micro = max(2, (cfg.ppo_micro_batch_size_per_gpu or len(data)) // 2 * 2)
        micro_batches = data.select(batch_keys=_SELECT_KEYS).split(rows_per_micro)
        self.gradient_accumulation = len(micro_batches)

        metrics: dict[str, list] = {}
        for _ in range(cfg.ppo_epochs):
            self.actor_optimizer.zero_grad()
            totals = torch.zeros(6, dtype=torch.float64)
            for micro_batch in micro_batches:
                totals += self._dpo_backward(to_device(micro_batch.batch.to_dict(), self.device), temperature, scale)
            grad_norm = self._optimizer_step()
            append_metrics(metrics, {**_pair_metrics(totals, self.device), "actor/grad_norm": to_float(grad_norm)})
        self.actor_optimizer.zero_grad()
        return metrics

    def _dpo_backward(self, micro_batch: dict, temperature: float, scale: float) -> torch.Tensor:
        """Forward, DPO loss and backward of one micro batch; returns its weighted sums for the metrics."""
        cfg = self.config
        response_length = micro_batch["responses"].size(-1)
        response_mask = micro_batch["attention_mask"][:, -response_length:]
        _, log_prob = self._forward_micro_batch(micro_batch, temperature)
        policy = sequence_log_probs(log_prob, response_mask)
        reference = sequence_log_probs(micro_batch["ref_log_prob"], response_mask)
        weight = micro_batch["dpo_weight"][0::2].to(policy.dtype)
        losses, logits = compute_online_dpo_loss(
            policy[0::2],
            policy[1::2],
            reference[0::2],
            reference[1::2],
            beta=cfg.dpo_beta,
            loss_type=cfg.dpo_loss_type,
            label_smoothing=cfg.dpo_label_smoothing,
            reduction="none",
        )
        ((losses * weight).sum() * scale).backward()
        with torch.no_grad():
            chosen_reward = cfg.dpo_beta * (policy[0::2] - reference[0::2])
            rejected_reward = cfg.dpo_beta * (policy[1::2] - reference[1::2])
            columns = (losses, logits, chosen_reward, rejected_reward, (logits > 0).to(policy.dtype))
            return torch.stack([weight.sum()] + [(c * weight).sum() for c in columns]).double().cpu()


def _pair_metrics(totals: torch.Tensor, device) -> dict[str, float]:
    """Means over every real pair of all ranks (the sums are all-reduced, so each rank reports the same)."""
    if dist.is_initialized():
        totals = totals.to(device)  # NCCL reduces device tensors only
        dist.all_reduce(totals)
    count, loss, logits, chosen, rejected, correct = totals.cpu().tolist()
    count = max(count, 1.0)
    return {
        "actor/dpo_loss": loss / count,
        "actor/dpo_logits": logits / count,
        "actor/rewards_chosen": chosen / count,
        "actor/rewards_rejected": rejected / count,
        "actor/rewards_margins": (chosen - rejected) / count,
        "actor/rewards_accuracies": correct / count,
    }
