"""The implicit process reward model over one data-parallel shard: scores and updates.

Log-probs come from `DataParallelPPOActor` (its micro-batching, remove-padding and forward), one instance over the
trainable reward model and one over the frozen reference; this module adds only PRIME's scoring and losses.
"""

from __future__ import annotations

import torch
import torch.distributed as dist

from recipe.prime.prime_config import PrimeRewardModelSettings
from recipe.prime.prime_core_algos import compute_ce_loss_rm, compute_dpo_loss_rm, last_token_mask
from verl.protocol import DataProto
from verl.workers.actor import DataParallelPPOActor
from verl.workers.engine.fsdp.hf_forward import optimizer_step
from verl.workers.engine.micro_batches import append_metrics, make_micro_batches, to_device, to_float

__all__ = ["DataParallelPRIMERewardModel", "implicit_rewards"]

_INPUT_KEYS = ["responses", "input_ids", "attention_mask", "position_ids"]


def implicit_rewards(token_q: torch.Tensor, response_mask: torch.Tensor, beta: float, granularity: str, norm: str):
    """``rm_scores`` ``(bs, T)`` from log-ratios ``token_q`` ``(bs, T)``.

    ``token``: ``beta * q_t`` on every response token; ``whole``: ``beta * sum_t q_t`` at the last token.
    ``batch_norm`` divides by the largest absolute reverse cumulative sum in the (global) batch, so every
    return-to-go of the PRM reward lies in [-1, 1]; ``none`` leaves the scale to ``beta``.
    """
    mask = response_mask.to(token_q.dtype)
    scores = beta * token_q * mask
    if granularity == "whole":
        scores = last_token_mask(response_mask).to(scores.dtype) * scores.sum(-1, keepdim=True)
    if norm == "batch_norm":
        scale = scores.flip(-1).cumsum(-1).flip(-1).abs().max()
        if dist.is_initialized() and dist.get_world_size() > 1:
            dist.all_reduce(scale, op=dist.ReduceOp.MAX)
        scores = scores / (scale + 1e-6)
    return scores


class DataParallelPRIMERewardModel:
    """Implicit PRM: ``rm_actor`` (trainable, with ``optimizer``) and ``ref_actor`` (frozen) share one tokenizer.

    ``micro_batch_size`` is per rank; ``use_dynamic_bsz`` / ``max_token_len`` as in the actor's log-prob pass.
    """

    def __init__(
        self,
        settings: PrimeRewardModelSettings,
        rm_actor: DataParallelPPOActor,
        ref_actor: DataParallelPPOActor,
        optimizer: torch.optim.Optimizer,
        micro_batch_size: int | None,
        use_dynamic_bsz: bool = False,
        max_token_len: int | None = None,
    ) -> None:
        self.settings = settings
        self.rm_actor, self.ref_actor, self.optimizer = rm_actor, ref_actor, optimizer
        self.micro_batch_size = micro_batch_size
        self.use_dynamic_bsz = use_dynamic_bsz
        self.max_token_len = max_token_len

    def _log_prob_meta(self, data: DataProto) -> DataProto:
        data.meta_info.update(
            micro_batch_size=self.micro_batch_size or len(data),
            use_dynamic_bsz=self.use_dynamic_bsz,
            max_token_len=self.max_token_len,
            temperature=1.0,  # the PRM scores the text itself, not the policy's sampling distribution
        )
        return data

    def ref_log_prob(self, data: DataProto) -> torch.Tensor:
        """Log-probs of ``responses`` under the frozen reference, ``(bs, T)``."""
        log_probs, _ = self.ref_actor.compute_log_prob(self._log_prob_meta(data))
        return log_probs

    def log_ratio(self, data: DataProto) -> torch.Tensor:
        """``q = log pi_rm - log pi_ref`` on response tokens (0 on padding), ``(bs, T)``, no grad."""
        data = self._log_prob_meta(data)
        rm_log_probs, _ = self.rm_actor.compute_log_prob(data)
        mask = data.batch["attention_mask"][:, -data.batch["responses"].shape[-1] :]
        return (rm_log_probs - self.ref_log_prob(data)) * mask

    def scores(self, token_q: torch.Tensor, response_mask: torch.Tensor) -> torch.Tensor:
        """``rm_scores`` of log-ratios ``token_q`` under this model's settings (see `implicit_rewards`)."""
        s = self.settings
        return implicit_rewards(token_q, response_mask, s.beta_train, s.granularity, s.norm)

    def compute_rm_score(self, data: DataProto) -> tuple[torch.Tensor, torch.Tensor]:
        """``(rm_scores, q)``, each ``(bs, T)``."""
        token_q = self.log_ratio(data)
        response_mask = data.batch["attention_mask"][:, -token_q.shape[-1] :]
        return self.scores(token_q, response_mask), token_q

    def update_rm(self, data: DataProto, mini_batch_size: int) -> tuple[torch.Tensor, torch.Tensor, dict]:
        """One pass over ``data`` in mini batches of ``mini_batch_size`` rows, one optimizer step each.

        batch: the input keys, ``acc`` ``(bs,)``, and for ``loss_type=dpo`` ``Q_bc`` / ``acc_bc`` ``(bs, n)`` (the
        group's detached ``sum q`` and acc). Returns ``(rm_scores, q, metrics)``: the scores and log-ratios of the
        training forward, i.e. of the weights before each mini batch's step (``update: after`` uses them).
        """
        s = self.settings
        dpo = s.loss_type == "dpo"
        keys = _INPUT_KEYS + ["acc"] + (["Q_bc", "acc_bc"] if dpo else [])
        data = data.select(batch_keys=keys)
        data.batch["ref_log_prob"] = self.ref_log_prob(data)
        keys.append("ref_log_prob")
        self.rm_actor.actor_module.train()
        metrics: dict[str, list] = {}
        q_parts = []
        for mini_batch in data.split(mini_batch_size):
            micro_batches, _ = make_micro_batches(mini_batch, keys, self.micro_batch_size or len(mini_batch), False)
            self.optimizer.zero_grad()
            for micro in micro_batches:
                micro = to_device(micro, self.rm_actor.device)
                response_mask = micro["attention_mask"][:, -micro["responses"].shape[-1] :]
                _, log_probs = self.rm_actor._forward_micro_batch(micro, temperature=1.0)
                token_q = (log_probs - micro["ref_log_prob"]) * response_mask
                acc = micro["acc"]
                if dpo:
                    q_group, acc_group = micro["Q_bc"], micro["acc_bc"]
                    loss = compute_dpo_loss_rm(token_q, acc, q_group, acc_group, response_mask, s.beta_train)
                else:
                    loss = compute_ce_loss_rm(token_q, acc, response_mask, s.beta_train)
                (loss * (len(acc) / len(mini_batch))).backward()
                q_parts.append(token_q.detach().cpu())
                seq_q = s.beta_train * token_q.detach().sum(-1)
                hit = ((seq_q > 0) == (acc > 0.5)).float().mean()
                step = {"reward_model/dpo_loss": to_float(loss), "reward_model/dpo_acc": to_float(hit)}
                append_metrics(metrics, step)
            grad_norm = optimizer_step(self.rm_actor.actor_module, self.optimizer, s.grad_clip)
            append_metrics(metrics, {"reward_model/grad_norm": to_float(grad_norm)})
        self.optimizer.zero_grad()
        token_q = torch.cat(q_parts)
        response_mask = data.batch["attention_mask"][:, -token_q.shape[-1] :].cpu()
        return self.scores(token_q, response_mask), token_q, metrics
