"""Data-parallel PPO critic: per-token value prediction and the clipped value-regression update."""

from __future__ import annotations

import logging

import torch
import torch.nn as nn
from omegaconf import DictConfig

import verl.utils.torch_functional as verl_F
from verl.protocol import DataProto
from verl.trainer.ppo.core_algos import compute_value_loss
from verl.utils.dataset.vision_utils import merge_multi_modal_inputs
from verl.workers.config import CriticConfig
from verl.workers.critic.base import BasePPOCritic
from verl.workers.engine.fsdp.cpu_attention import training_attention
from verl.workers.engine.fsdp.hf_forward import (
    autocast_context,
    compute_device,
    gather_sequence_parallel,
    optimizer_step,
    pack_padded_inputs,
    packed_forward_kwargs,
    padded_forward,
    slice_for_sequence_parallel,
    unpack_to_padded,
)
from verl.workers.engine.micro_batches import (
    append_metrics,
    gradient_accumulation_steps,
    make_micro_batches,
    restore_order,
    to_device,
    to_float,
)

logger = logging.getLogger(__name__)

__all__ = ["DataParallelPPOCritic"]


class DataParallelPPOCritic(BasePPOCritic):
    """PPO critic over one data-parallel shard.

    ``config`` is the ``critic`` section after the worker's batch-size normalisation; ``critic_module`` is an HF
    ``AutoModelForTokenClassification`` with ``num_labels=1`` (or a TRL value-head model with ``v_head``).
    """

    def __init__(
        self,
        config: CriticConfig | DictConfig,
        critic_module: nn.Module,
        critic_optimizer: torch.optim.Optimizer | None,
    ):
        config = CriticConfig.from_config(config)
        super().__init__(config)
        self.critic_module = critic_module
        self.critic_optimizer = critic_optimizer
        self.use_remove_padding = config.model.use_remove_padding
        self.ulysses_sequence_parallel_size = config.ulysses_sequence_parallel_size
        if self.ulysses_sequence_parallel_size > 1 and not self.use_remove_padding:
            raise ValueError(
                f"critic.ulysses_sequence_parallel_size={self.ulysses_sequence_parallel_size} needs packed inputs: "
                "set critic.model.use_remove_padding=True"
            )
        self.device = compute_device()

    def _values_from_output(self, output) -> torch.Tensor:
        if hasattr(self.critic_module, "v_head"):
            return output[2]  # TRL AutoModelForCausalLMWithValueHead returns (logits, loss, value)
        return output.logits

    def _forward_micro_batch(self, micro_batch: dict) -> torch.Tensor:
        """Values ``(b, response_length)``: the prediction at the state before each response token."""
        response_length = micro_batch["responses"].size(-1)
        input_ids = micro_batch["input_ids"]
        attention_mask = micro_batch["attention_mask"]
        position_ids = micro_batch["position_ids"]
        mm_kwargs = merge_multi_modal_inputs(micro_batch)
        with autocast_context():
            if self.use_remove_padding:
                ids_rmpad, pos_rmpad, valid = pack_padded_inputs(input_ids, attention_mask, position_ids)
                sp = self.ulysses_sequence_parallel_size
                ids_rmpad, pos_rmpad, _, sp_pad = slice_for_sequence_parallel(
                    sp, ids_rmpad, pos_rmpad, multi_modal=bool(mm_kwargs)
                )
                dtype = next(self.critic_module.parameters()).dtype
                kwargs = packed_forward_kwargs(self.critic_module, pos_rmpad, dtype)
                output = self.critic_module(input_ids=ids_rmpad, **kwargs, **mm_kwargs)
                values_rmpad = self._values_from_output(output).reshape(-1)  # (nnz / sp,)
                values = unpack_to_padded(gather_sequence_parallel(values_rmpad, sp, sp_pad), valid)
                return values[:, -response_length - 1 : -1]
            output, kept = padded_forward(
                self.critic_module, input_ids, attention_mask, position_ids, response_length, **mm_kwargs
            )
            values = self._values_from_output(output)
            if values.dim() == 3:
                values = values.squeeze(-1)
            values = values[:, -kept - 1 : -1]
            return torch.nn.functional.pad(values, (0, response_length - kept))

    def _optimizer_step(self) -> torch.Tensor:
        """Clip gradients to ``grad_clip`` and step the optimizer (skipped when the norm is not finite)."""
        return optimizer_step(self.critic_module, self.critic_optimizer, self.config.grad_clip)

    def compute_values(self, data: DataProto) -> torch.Tensor:
        """Values of each response position, zero past the response: ``(bs, response_length)``.

        meta_info: ``micro_batch_size``, ``use_dynamic_bsz``, ``max_token_len`` (dynamic only).
        """
        self.critic_module.eval()
        meta = data.meta_info
        use_dynamic_bsz = meta.get("use_dynamic_bsz", False)
        max_token_len = meta.get("max_token_len")
        if use_dynamic_bsz and max_token_len is not None:
            max_token_len = max_token_len * self.ulysses_sequence_parallel_size
        select_keys = ["responses", "input_ids", "attention_mask", "position_ids"]
        micro_batches, partitions = make_micro_batches(
            data, select_keys, meta.get("micro_batch_size"), use_dynamic_bsz, max_token_len
        )
        values_list = []
        for micro_batch in micro_batches:
            with torch.no_grad():
                values_list.append(self._forward_micro_batch(to_device(micro_batch, self.device)))
        values = restore_order(torch.cat(values_list, dim=0), partitions)
        response_length = data.batch["responses"].size(-1)
        response_mask = data.batch["attention_mask"][:, -response_length:].to(values.device)
        return values * response_mask

    def update_critic(self, data: DataProto) -> dict[str, list]:
        """Clipped value regression over ``ppo_epochs`` x mini batches; returns metric lists.

        batch: ``input_ids, responses, attention_mask, position_ids, values, returns`` (each ``(bs, ...)``).
        """
        if self.critic_optimizer is None:
            raise RuntimeError("update_critic needs an optimizer (critic_optimizer is None)")
        with self._training_attention():
            return self._update_critic(data)

    def _training_attention(self):
        """See :func:`verl.workers.engine.fsdp.cpu_attention.training_attention`."""
        return training_attention(self.critic_module, self.device, self.ulysses_sequence_parallel_size)

    def _update_critic(self, data: DataProto) -> dict[str, list]:
        self.critic_module.train()
        cfg = self.config
        select_keys = ["input_ids", "responses", "attention_mask", "position_ids", "values", "returns"]
        keep_non_tensor = ["multi_modal_inputs"] if "multi_modal_inputs" in data.non_tensor_batch else []
        data = data.select(batch_keys=select_keys, non_tensor_batch_keys=keep_non_tensor)
        mini_batch_size = cfg.ppo_mini_batch_size
        use_dynamic_bsz = cfg.use_dynamic_bsz
        micro_batch_size = cfg.ppo_micro_batch_size_per_gpu
        max_token_len = cfg.ppo_max_token_len_per_gpu * self.ulysses_sequence_parallel_size
        loss_agg_mode = cfg.loss_agg_mode
        cliprange_value = cfg.cliprange_value

        metrics: dict[str, list] = {}
        for _ in range(cfg.ppo_epochs):
            for mini_batch in data.split(mini_batch_size):
                micro_batches, _ = make_micro_batches(
                    mini_batch, select_keys, micro_batch_size, use_dynamic_bsz, max_token_len
                )
                if not use_dynamic_bsz:
                    self.gradient_accumulation = gradient_accumulation_steps(
                        mini_batch_size, micro_batch_size, "critic"
                    )
                self.critic_optimizer.zero_grad()
                for micro_batch in micro_batches:
                    micro_batch = to_device(micro_batch, self.device)
                    response_length = micro_batch["responses"].size(-1)
                    response_mask = micro_batch["attention_mask"][:, -response_length:]
                    vpreds = self._forward_micro_batch(micro_batch)
                    vf_loss, vf_clipfrac = compute_value_loss(
                        vpreds=vpreds,
                        returns=micro_batch["returns"],
                        values=micro_batch["values"],
                        response_mask=response_mask,
                        cliprange_value=cliprange_value,
                        loss_agg_mode=loss_agg_mode,
                    )
                    if use_dynamic_bsz:
                        loss = vf_loss * (response_mask.shape[0] / mini_batch_size)
                    else:
                        loss = vf_loss / self.gradient_accumulation
                    loss.backward()
                    append_metrics(
                        metrics,
                        {
                            "critic/vf_loss": to_float(vf_loss),
                            "critic/vf_clipfrac": to_float(vf_clipfrac),
                            "critic/vpred_mean": to_float(verl_F.masked_mean(vpreds, response_mask)),
                        },
                    )
                grad_norm = self._optimizer_step()
                append_metrics(metrics, {"critic/grad_norm": to_float(grad_norm)})
        self.critic_optimizer.zero_grad()
        return metrics
