"""The PPO actor over a training engine: log-prob recomputation and the clipped policy-gradient update.

Backend-free: the mini-batch / epoch loop, the policy loss (any registered ``policy_loss.loss_mode``), the KL loss
and the entropy bonus, and their metrics; the forward, backward and optimizer step are the engine's
(:class:`verl.workers.engine.TrainingEngine`).
"""

from __future__ import annotations

import torch

from verl.protocol import DataProto
from verl.trainer.ppo.core_algos import kl_penalty
from verl.trainer.ppo.losses import agg_loss, compute_policy_loss_gpg, get_policy_loss_fn
from verl.trainer.ppo.rollout_corr_helper import rollout_correction, rollout_correction_kwargs
from verl.workers.actor.base import BasePPOActor
from verl.workers.config import ActorConfig, RefConfig
from verl.workers.engine.base import TrainingEngine
from verl.workers.engine.micro_batches import append_metrics, gradient_accumulation_steps, to_float
from verl.workers.engine.nonfinite import NonFiniteGuard

__all__ = ["PPOActor"]


class PPOActor(BasePPOActor):
    """PPO actor over one data-parallel shard; the reference policy when ``engine`` has no optimizer.

    ``config`` is ``actor_rollout_ref.actor`` (or ``.ref``) after the worker's batch-size normalisation (per-GPU
    ``ppo_mini_batch_size`` in samples); ``engine`` a policy engine.
    """

    def __init__(self, config: ActorConfig | RefConfig, engine: TrainingEngine):
        super().__init__(config)
        self.engine = engine

    def _optimizer_step(self) -> torch.Tensor:
        """Clip gradients to ``grad_clip`` and step the optimizer (skipped when the norm is not finite)."""
        return self.engine.optimizer_step()

    def compute_log_prob(
        self, data: DataProto, calculate_entropy: bool = False
    ) -> tuple[torch.Tensor, torch.Tensor | None]:
        """Log-probs (and entropies) of ``responses`` under the current weights, no grad; each ``(bs, T)``.

        meta_info: ``micro_batch_size``, ``temperature``, ``use_dynamic_bsz``, ``max_token_len`` (dynamic only).
        Returns a tuple (verl's base class documents a tensor; the worker unpacks a tuple).
        """
        meta_info = {**data.meta_info, "calculate_entropy": calculate_entropy}
        outputs = self.engine.infer(DataProto(data.batch, data.non_tensor_batch, meta_info))
        return outputs["log_probs"], outputs.get("entropys")

    def update_policy(self, data: DataProto) -> dict[str, list]:
        """PPO update over ``ppo_epochs`` x mini batches, one optimizer step per mini batch; returns metric lists.

        batch: ``responses, input_ids, attention_mask, position_ids, old_log_probs, advantages`` (+ ``ref_log_prob``
        with ``use_kl_loss``, + ``loss_mask`` when ``meta_info["multi_turn"]``). meta_info: ``temperature``
        (required: KeyError otherwise, so a log-prob/update temperature mismatch cannot pass silently).

        Rollout correction: ``rollout_is_weights`` (if present) multiplies the per-token policy loss and
        ``response_mask`` (if present: the trainer's, less the rejected tokens) multiplies the loss mask. With
        ``meta_info["rollout_correction"]`` in bypass mode (``bypass_mode=True``, the old log-probs are the rollout's)
        the weights and the rejection are computed here per micro batch from ``pi_theta / pi_rollout``.

        Without ``old_log_probs`` the update is *on-policy*: one epoch over one mini batch, so the policy that
        sampled is the one being updated, and the old log-probs are this forward's own, detached (the ratio is 1,
        the gradient that of ``-A * log_prob``). That saves the separate log-prob pass; ``actor/entropy`` is then
        measured here.
        """
        if not self.engine.trainable:
            raise RuntimeError("update_policy needs an optimizer: this actor was built as a reference policy")
        with self.engine.training(data) as data:
            return self._update_policy(data)

    @staticmethod
    def _bypass_correction(correction: dict | None, on_policy: bool) -> dict | None:
        """The rollout-correction settings when this update corrects in bypass mode, else None."""
        if not correction or not correction.get("bypass_mode"):
            return None
        if on_policy:
            raise ValueError(
                "algorithm.rollout_correction.bypass_mode=True needs old_log_probs (the rollout's) in the batch"
            )
        return correction

    @staticmethod
    def _bypass_weights(
        correction: dict, log_prob: torch.Tensor, rollout_log_prob: torch.Tensor, response_mask: torch.Tensor
    ) -> tuple[torch.Tensor, dict, dict]:
        """Bypass mode: rejection and IS weights from ``pi_theta / pi_rollout`` of this micro batch, ``(bs, T)``.

        ``ppo_clip``: the PPO ratio already is ``pi_theta / pi_rollout``, so only the rejection applies (the IS
        statistics are logged); ``reinforce``: the IS weights multiply the policy-gradient loss too.
        """
        weights, mask, metrics = rollout_correction(
            log_prob.detach(), rollout_log_prob, response_mask, **rollout_correction_kwargs(correction)
        )
        kwargs = {}
        if weights is not None and correction.get("loss_type") == "reinforce":
            kwargs["rollout_is_weights"] = weights
        return mask.to(response_mask.dtype), kwargs, metrics

    def _update_policy(self, data: DataProto) -> dict[str, list]:
        cfg = self.config
        engine = self.engine
        temperature = data.meta_info["temperature"]
        multi_turn = data.meta_info.get("multi_turn", False)
        use_kl_loss = cfg.use_kl_loss
        on_policy = "old_log_probs" not in data.batch.keys()
        if on_policy and (cfg.ppo_epochs != 1 or len(data) > cfg.ppo_mini_batch_size):
            raise ValueError(
                f"the batch has no old_log_probs, which is only valid for one on-policy update: ppo_epochs="
                f"{cfg.ppo_epochs} (expected 1), {len(data)} samples for a mini batch of {cfg.ppo_mini_batch_size}"
            )
        select_keys = ["responses", "input_ids", "attention_mask", "position_ids", "advantages"]
        if not on_policy:
            select_keys.append("old_log_probs")
        if multi_turn:
            select_keys.append("loss_mask")
        if use_kl_loss:
            select_keys.append("ref_log_prob")
        # rollout correction computed by the trainer (decoupled mode): weights and the mask less rejected tokens
        select_keys += [k for k in ("rollout_is_weights", "response_mask") if k in data.batch.keys()]
        bypass = self._bypass_correction(data.meta_info.get("rollout_correction"), on_policy)
        keep_non_tensor = ["multi_modal_inputs"] if "multi_modal_inputs" in data.non_tensor_batch else []
        data = data.select(batch_keys=select_keys, non_tensor_batch_keys=keep_non_tensor)

        mini_batch_size = cfg.ppo_mini_batch_size
        use_dynamic_bsz = cfg.use_dynamic_bsz
        micro_batch_size = cfg.ppo_micro_batch_size_per_gpu
        entropy_coeff = cfg.entropy_coeff
        # the bonus needs the entropy with its gradient; calculate_entropy only asks for the metric
        entropy_bonus = entropy_coeff != 0
        calculate_entropy = entropy_bonus or cfg.calculate_entropy
        loss_agg_mode, loss_scale_factor = cfg.loss_agg_mode, cfg.loss_scale_factor
        # every mode, vanilla included, through the registry: a recipe may register (or replace) any of them
        policy_loss_fn = get_policy_loss_fn(cfg.policy_loss.loss_mode)
        if bypass is not None and bypass.get("loss_type") == "reinforce":
            # REINFORCE with explicit IS weights pi_theta / pi_rollout, no PPO clipping
            policy_loss_fn = compute_policy_loss_gpg

        def loss_fn(outputs: dict, micro_batch: dict) -> tuple[torch.Tensor, dict[str, float]]:
            log_prob, entropy = outputs["log_probs"], outputs["entropy"]
            response_length = micro_batch["responses"].size(-1)
            if multi_turn:
                response_mask = micro_batch["loss_mask"][:, -response_length:]
            else:
                response_mask = micro_batch["attention_mask"][:, -response_length:]
            if "response_mask" in micro_batch.keys():
                response_mask = response_mask * micro_batch["response_mask"]
            old_log_prob = log_prob.detach() if on_policy else micro_batch["old_log_probs"]
            loss_kwargs, corr_metrics = {}, {}
            if "rollout_is_weights" in micro_batch.keys():
                loss_kwargs["rollout_is_weights"] = micro_batch["rollout_is_weights"]
            if bypass is not None:
                response_mask, loss_kwargs, corr_metrics = self._bypass_weights(
                    bypass, log_prob, old_log_prob, response_mask
                )
            pg_loss, pg_clipfrac, ppo_kl, pg_clipfrac_lower = policy_loss_fn(
                old_log_prob, log_prob, micro_batch["advantages"], response_mask, loss_agg_mode, cfg, **loss_kwargs
            )
            metrics = {
                "actor/pg_loss": to_float(pg_loss),
                "actor/pg_clipfrac": to_float(pg_clipfrac),
                "actor/ppo_kl": to_float(ppo_kl),
                "actor/pg_clipfrac_lower": to_float(pg_clipfrac_lower),
                **corr_metrics,
            }
            policy_loss = pg_loss
            if entropy_bonus:
                entropy_loss = agg_loss(entropy, response_mask, loss_agg_mode, loss_scale_factor)
                policy_loss = policy_loss - entropy_coeff * entropy_loss
                metrics["actor/entropy"] = to_float(entropy_loss)
            elif calculate_entropy or on_policy:
                metrics["actor/entropy"] = to_float(agg_loss(entropy, response_mask, loss_agg_mode, loss_scale_factor))
            if use_kl_loss:
                kld = kl_penalty(log_prob, micro_batch["ref_log_prob"], cfg.kl_loss_type)
                kl_loss = agg_loss(kld, response_mask, loss_agg_mode, loss_scale_factor)
                policy_loss = policy_loss + cfg.kl_loss_coef * kl_loss
                metrics["actor/kl_loss"] = to_float(kl_loss)
                metrics["actor/kl_coef"] = cfg.kl_loss_coef
            if use_dynamic_bsz:
                # Micro batches differ in size: weight each by its share of the mini batch.
                return policy_loss * (response_mask.shape[0] / mini_batch_size), metrics
            return policy_loss / self.gradient_accumulation, metrics

        guard = NonFiniteGuard("actor", data.meta_info.get("global_steps"))
        guarded_loss_fn = guard.wrap(loss_fn)
        metrics: dict[str, list] = {}
        for _ in range(cfg.ppo_epochs):
            for mini_batch in data.split(mini_batch_size):
                micro_batches = engine.micro_batches(
                    mini_batch, micro_batch_size, use_dynamic_bsz, cfg.ppo_max_token_len_per_gpu
                )
                if not use_dynamic_bsz:
                    self.gradient_accumulation = gradient_accumulation_steps(mini_batch_size, micro_batch_size, "actor")
                engine.zero_grad()
                guard.start_mini_batch()
                for micro_batch in micro_batches:
                    # on-policy: the entropy metric the skipped log-prob pass would have given comes from here
                    step_metrics = engine.forward_backward(
                        micro_batch,
                        guarded_loss_fn,
                        temperature=temperature,
                        calculate_entropy=calculate_entropy or on_policy,
                        entropy_grad=entropy_bonus,
                    )
                    append_metrics(metrics, step_metrics)
                grad_norm = guard.step(self._optimizer_step, engine.zero_grad)
                append_metrics(metrics, {"actor/grad_norm": to_float(grad_norm)})
        engine.zero_grad()
        append_metrics(metrics, guard.metrics())
        return metrics
