"""The training-engine interface: one model of a role on this worker's devices, whatever the parallelism backend.

The role workers (actor / rollout / reference, critic, reward model) and the PPO logic on top of them (the actor's and
critic's mini-batch loops and losses) talk to this interface only; a backend (FSDP/FSDP2 today, Megatron later)
implements it in a sibling package and registers itself under the ``strategy`` names it serves
(:func:`verl.workers.engine.registry.register_engine`).

A *micro batch* is a dict of tensors (``input_ids``, ``attention_mask``, ``position_ids`` ``(b, seqlen)``,
``responses`` ``(b, response_length)``, and whatever the loss reads) plus, for vision-language models,
``multi_modal_inputs``. The model kinds and what their forwards return:

- ``"policy"`` (actor, rollout, reference): ``log_probs`` and ``entropy`` ``(b, response_length)``, the log-prob of
  each response token under the logits divided by ``temperature``;
- ``"value"`` (critic): ``values`` ``(b, response_length)``, the prediction at the state before each response token;
- ``"score"`` (reward model): ``scores`` ``(b,)``, the model's output at each row's last valid token.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager
from typing import TYPE_CHECKING, Any

import torch

from verl.protocol import DataProto

if TYPE_CHECKING:
    from verl.workers.engine.pretrained import PretrainedFiles
    from verl.workers.sharding_manager.base import BaseShardingManager

__all__ = ["LossFn", "TrainingEngine"]

# loss_fn(outputs, micro_batch) -> (loss, metrics): outputs as the forward of the engine's model kind returns them
# (see the module doc), micro_batch as given to forward_backward (on the compute device); the loss is what is
# differentiated, already scaled for gradient accumulation; metrics are python floats.
LossFn = Callable[[dict[str, torch.Tensor], dict[str, Any]], tuple[torch.Tensor, dict[str, float]]]


class TrainingEngine(ABC):
    """One model (policy, value or reward model), trainable with its optimizer, LR scheduler and checkpoints, or
    frozen; built from the role's typed config by :meth:`build`."""

    #: "policy", "value" or "score" (see the module doc)
    kind: str

    @classmethod
    @abstractmethod
    def build(cls, role: str, config, files: PretrainedFiles) -> TrainingEngine:
        """The engine of ``role`` on this worker: its model loaded from ``files`` and sharded as ``config`` says.

        ``role``: ``"actor"`` (trainable policy), ``"rollout"`` (a frozen policy to sample from, built like the
        actor), ``"ref"`` (frozen, offloaded reference policy) with ``config`` the ``actor_rollout_ref`` section;
        ``"critic"`` (trainable value model) with the ``critic`` section; ``"reward_model"`` (frozen scorer) with the
        ``reward_model`` section. Trainable engines also build the optimizer, LR scheduler and checkpoint manager.
        Must be called on every rank of the worker group (collective).
        """

    @property
    @abstractmethod
    def trainable(self) -> bool:
        """Whether the engine has an optimizer (actor, critic), or is a frozen model (rollout, ref, reward model)."""

    @property
    @abstractmethod
    def module(self) -> torch.nn.Module:
        """The model itself: the HF rollout samples from it, a LoRA policy switches its adapters off on it."""

    @abstractmethod
    def infer(self, data: DataProto) -> dict[str, torch.Tensor]:
        """Forward without grad over ``data``, in the engine's own micro batches (dynamic batch size, packing,
        sequence parallelism); results in ``data``'s row order, for this rank's rows.

        meta_info: ``micro_batch_size``, ``use_dynamic_bsz``, ``max_token_len`` (per device, dynamic only); policy:
        ``temperature`` and ``calculate_entropy``. Returns, by kind: ``{"log_probs", "entropys"}`` (``entropys`` only
        when asked) or ``{"values"}``, each ``(bs, response_length)``; ``{"scores"}`` ``(bs,)``.
        """

    @abstractmethod
    def training(self, data: DataProto) -> AbstractContextManager[DataProto]:
        """Context of one update over ``data``: the model in training mode; yields the batch this rank trains on
        (under sequence parallelism, the rows of its whole group)."""

    @abstractmethod
    def micro_batches(
        self, data: DataProto, micro_batch_size: int | None, use_dynamic_bsz: bool, max_token_len: int | None
    ) -> list[dict]:
        """``data`` (a mini batch) split into the micro batches :meth:`forward_backward` takes: ``micro_batch_size``
        rows each, or with ``use_dynamic_bsz`` at most ``max_token_len`` valid tokens per device each."""

    @abstractmethod
    def forward_backward(self, micro_batch: dict, loss_fn: LossFn, **forward_kwargs) -> dict[str, float]:
        """Forward one micro batch with grad, ``loss_fn(outputs, micro_batch)``, backward of its loss (gradients
        accumulate until :meth:`optimizer_step`); returns the loss function's metrics.

        forward_kwargs (policy): ``temperature``; ``calculate_entropy`` (return ``entropy``) and ``entropy_grad``
        (whether the loss differentiates it).
        """

    @abstractmethod
    def zero_grad(self) -> None:
        """Drop the accumulated gradients."""

    @abstractmethod
    def optimizer_step(self) -> torch.Tensor:
        """Clip the gradients to the role's ``grad_clip`` and step the optimizer (skipped when their norm is not
        finite); returns the global grad norm before clipping (0-d)."""

    @abstractmethod
    def lr(self) -> float:
        """The optimizer's current learning rate."""

    @abstractmethod
    def lr_scheduler_step(self) -> None:
        """Advance the LR schedule by one training step."""

    @abstractmethod
    def resident(self, with_optimizer: bool = False) -> AbstractContextManager[None]:
        """The model (and, ``with_optimizer``, its optimizer state) on the device for the block, wherever the
        role's offload settings keep it between calls."""

    @abstractmethod
    def rollout_weight_handoff(self, rollout, hf_config, rollout_config, device_mesh) -> BaseShardingManager:
        """The context that hands this engine's current weights to ``rollout``'s inference engine around each
        generation (and frees that engine's memory after it). ``device_mesh``: the rollout's ``("dp", "infer_tp")``
        mesh."""

    def hf_weights(self) -> Iterator[tuple[str, torch.Tensor]]:
        """The current weights as full tensors named as in the model's HF checkpoint, gathered piece by piece (a
        collective: every rank of the engine consumes the whole iterator); what the weight hand-offs and the
        checkpoint engine send to a rollout. A LoRA policy's adapters come folded into the base weights; an LM head
        tied to the embedding is left out (the receiver ties it again)."""
        raise NotImplementedError(f"{type(self).__name__} does not stream its weights to a rollout")

    def hf_rollout_module(self) -> tuple[torch.nn.Module, BaseShardingManager | None]:
        """The HF model the HF rollout samples from, and the hand-off that brings this engine's current weights into
        it before each generation (None: it is the engine's own module, always current)."""
        return self.module, None

    @abstractmethod
    def save_checkpoint(self, local_path: str, hdfs_path=None, global_step: int = 0, max_ckpt_to_keep=None) -> None:
        """Save this rank's shard of the model, optimizer, LR scheduler and RNG state under ``local_path``."""

    @abstractmethod
    def load_checkpoint(self, local_path: str, hdfs_path=None, del_local_after_load: bool = False) -> None:
        """Restore the state :meth:`save_checkpoint` saved."""
