"""The data-parallel PPO critic: :class:`PPOCritic` over an FSDP engine built around an existing (FSDP or plain)
value model, as verl's ``DataParallelPPOCritic(config, critic_module, critic_optimizer)`` is constructed."""

from __future__ import annotations

import torch
import torch.nn as nn
from omegaconf import DictConfig

from verl.workers.config import CriticConfig
from verl.workers.critic.ppo_critic import PPOCritic
from verl.workers.engine.fsdp import FSDPEngine

__all__ = ["DataParallelPPOCritic"]


class DataParallelPPOCritic(PPOCritic):
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
        engine = FSDPEngine(
            critic_module,
            critic_optimizer,
            kind="value",
            grad_clip=config.grad_clip,
            use_remove_padding=config.model.use_remove_padding,
            ulysses_sp_size=config.ulysses_sequence_parallel_size,
            remove_padding_key="critic.model.use_remove_padding",
        )
        super().__init__(config, engine)
        self.device = engine.device

    @property
    def critic_module(self) -> nn.Module:
        return self.engine.module

    @property
    def critic_optimizer(self) -> torch.optim.Optimizer | None:
        return self.engine.optimizer

    def _forward_micro_batch(self, micro_batch: dict) -> torch.Tensor:
        """Values ``(b, response_length)``: the prediction at the state before each response token."""
        return self.engine.value_forward(micro_batch)
