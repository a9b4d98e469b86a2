"""The data-parallel PPO actor: :class:`PPOActor` over an FSDP engine built around an existing (FSDP or plain) HF
causal LM, as verl's ``DataParallelPPOActor(config, actor_module, actor_optimizer)`` is constructed."""

from __future__ import annotations

import torch
import torch.nn as nn
from omegaconf import DictConfig

from verl.workers.actor.ppo_actor import PPOActor
from verl.workers.config import ActorConfig, RefConfig
from verl.workers.engine.fsdp import FSDPEngine

__all__ = ["DataParallelPPOActor"]


class DataParallelPPOActor(PPOActor):
    """PPO actor over one data-parallel shard; the reference policy when ``actor_optimizer`` is None.

    ``config`` is ``actor_rollout_ref.actor`` (or ``.ref``) after the worker's batch-size normalisation.
    ``actor_module`` is an HF causal LM, plain, FSDP1 or FSDP2-sharded. Under Ulysses sequence parallelism the
    caller installs the SP group (``FSDPUlyssesShardingManager``) and gathers the group's rows.
    """

    def __init__(
        self,
        config: ActorConfig | RefConfig | DictConfig,
        actor_module: nn.Module,
        actor_optimizer: torch.optim.Optimizer | None = None,
    ):
        if not isinstance(config, ActorConfig | RefConfig):
            config = ActorConfig.from_config(config)
        engine = FSDPEngine(
            actor_module,
            actor_optimizer,
            kind="policy",
            grad_clip=getattr(config, "grad_clip", None),
            use_remove_padding=config.use_remove_padding,
            use_fused_kernels=config.use_fused_kernels,
            ulysses_sp_size=config.ulysses_sequence_parallel_size,
            entropy_from_logits_with_chunking=config.entropy_from_logits_with_chunking,
            entropy_from_logits_chunk_size=config.entropy_from_logits_chunk_size,
            use_torch_compile=config.use_torch_compile,
            entropy_checkpointing=config.entropy_checkpointing,
            remove_padding_key="actor_rollout_ref.model.use_remove_padding",
        )
        super().__init__(config, engine)
        self.device = engine.device

    @classmethod
    def over_engine(cls, config: ActorConfig | RefConfig, engine: FSDPEngine) -> DataParallelPPOActor:
        """This actor over an engine already built (a worker's), sharing its sequence parallelism and offloading:
        how a recipe swaps its own actor class in for the worker's."""
        actor = cls.__new__(cls)
        PPOActor.__init__(actor, config, engine)
        actor.device = engine.device
        return actor

    @property
    def actor_module(self) -> nn.Module:
        return self.engine.module

    @property
    def actor_optimizer(self) -> torch.optim.Optimizer | None:
        return self.engine.optimizer

    def _forward_micro_batch(
        self, micro_batch: dict, temperature: float, calculate_entropy: bool = False, entropy_grad: bool = True
    ) -> tuple[torch.Tensor | None, torch.Tensor]:
        """Per-token entropy (or None) and log-probs of ``responses``, both ``(b, response_length)``, with grad
        (see :meth:`FSDPEngine.policy_forward`); ``micro_batch`` on the compute device."""
        return self.engine.policy_forward(micro_batch, temperature, calculate_entropy, entropy_grad)
