"""The PPO critic over a training engine: per-token value prediction and the clipped value-regression update.

Backend-free: the mini-batch / epoch loop, the value loss and its metrics; the forward, backward and optimizer step are
the engine's (:class:`verl.workers.engine.TrainingEngine`).
"""

from __future__ import annotations

import torch

import verl.utils.torch_functional as verl_F
from verl.protocol import DataProto
from verl.trainer.ppo.losses import compute_value_loss
from verl.workers.config import CriticConfig
from verl.workers.critic.base import BasePPOCritic
from verl.workers.engine.base import TrainingEngine
from verl.workers.engine.micro_batches import append_metrics, gradient_accumulation_steps, to_float
from verl.workers.engine.nonfinite import NonFiniteGuard

__all__ = ["PPOCritic"]


class PPOCritic(BasePPOCritic):
    """PPO critic over one data-parallel shard. ``config`` is the ``critic`` section after the worker's batch-size
    normalisation; ``engine`` a value engine."""

    def __init__(self, config: CriticConfig, engine: TrainingEngine):
        super().__init__(config)
        self.engine = engine

    def _optimizer_step(self) -> torch.Tensor:
        """Clip gradients to ``grad_clip`` and step the optimizer (skipped when the norm is not finite)."""
        return self.engine.optimizer_step()

    def compute_values(self, data: DataProto) -> torch.Tensor:
        """Values of each response position, zero past the response: ``(bs, response_length)``.

        meta_info: ``micro_batch_size``, ``use_dynamic_bsz``, ``max_token_len`` (dynamic only).
        """
        values = self.engine.infer(data)["values"]
        response_length = data.batch["responses"].size(-1)
        response_mask = data.batch["attention_mask"][:, -response_length:].to(values.device)
        return values * response_mask

    def update_critic(self, data: DataProto) -> dict[str, list]:
        """Clipped value regression over ``ppo_epochs`` x mini batches; returns metric lists.

        batch: ``input_ids, responses, attention_mask, position_ids, values, returns`` (each ``(bs, ...)``).
        """
        if not self.engine.trainable:
            raise RuntimeError("update_critic needs an optimizer (critic_optimizer is None)")
        with self.engine.training(data) as data:
            return self._update_critic(data)

    def _update_critic(self, data: DataProto) -> dict[str, list]:
        cfg = self.config
        engine = self.engine
        select_keys = ["input_ids", "responses", "attention_mask", "position_ids", "values", "returns"]
        keep_non_tensor = ["multi_modal_inputs"] if "multi_modal_inputs" in data.non_tensor_batch else []
        data = data.select(batch_keys=select_keys, non_tensor_batch_keys=keep_non_tensor)
        mini_batch_size = cfg.ppo_mini_batch_size
        use_dynamic_bsz = cfg.use_dynamic_bsz
        micro_batch_size = cfg.ppo_micro_batch_size_per_gpu

        def loss_fn(outputs: dict, micro_batch: dict) -> tuple[torch.Tensor, dict[str, float]]:
            vpreds = outputs["values"]
            response_length = micro_batch["responses"].size(-1)
            response_mask = micro_batch["attention_mask"][:, -response_length:]
            vf_loss, vf_clipfrac = compute_value_loss(
                vpreds=vpreds,
                returns=micro_batch["returns"],
                values=micro_batch["values"],
                response_mask=response_mask,
                cliprange_value=cfg.cliprange_value,
                loss_agg_mode=cfg.loss_agg_mode,
                loss_scale_factor=cfg.loss_scale_factor,
            )
            if use_dynamic_bsz:
                loss = vf_loss * (response_mask.shape[0] / mini_batch_size)
            else:
                loss = vf_loss / self.gradient_accumulation
            metrics = {
                "critic/vf_loss": to_float(vf_loss),
                "critic/vf_clipfrac": to_float(vf_clipfrac),
                "critic/vpred_mean": to_float(verl_F.masked_mean(vpreds, response_mask)),
            }
            return loss, metrics

        guard = NonFiniteGuard("critic", data.meta_info.get("global_steps"))
        guarded_loss_fn = guard.wrap(loss_fn)
        metrics: dict[str, list] = {}
        for _ in range(cfg.ppo_epochs):
            for mini_batch in data.split(mini_batch_size):
                micro_batches = engine.micro_batches(
                    mini_batch, micro_batch_size, use_dynamic_bsz, cfg.ppo_max_token_len_per_gpu
                )
                if not use_dynamic_bsz:
                    self.gradient_accumulation = gradient_accumulation_steps(
                        mini_batch_size, micro_batch_size, "critic"
                    )
                engine.zero_grad()
                guard.start_mini_batch()
                for micro_batch in micro_batches:
                    append_metrics(metrics, engine.forward_backward(micro_batch, guarded_loss_fn))
                grad_norm = guard.step(self._optimizer_step, engine.zero_grad)
                append_metrics(metrics, {"critic/grad_norm": to_float(grad_norm)})
        engine.zero_grad()
        append_metrics(metrics, guard.metrics())
        return metrics
