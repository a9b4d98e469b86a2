"""Data-parallel PPO actor: log-prob recomputation and the clipped policy-gradient update on one (FSDP) model."""

from __future__ import annotations

import logging

import torch
import torch.nn as nn
from omegaconf import DictConfig

import verl.utils.torch_functional as verl_F
from verl.protocol import DataProto
from verl.trainer.ppo.core_algos import agg_loss, get_policy_loss_fn, kl_penalty
from verl.utils.dataset.vision_utils import merge_multi_modal_inputs
from verl.utils.device import release_freed_host_memory
from verl.workers.actor.base import BasePPOActor
from verl.workers.config import ActorConfig, RefConfig
from verl.workers.engine.fsdp.cpu_attention import training_attention
from verl.workers.engine.fsdp.fused_head import check_fusable_head, fused_output_head
from verl.workers.engine.fsdp.hf_forward import (
    autocast_context,
    compute_device,
    gather_sequence_parallel,
    optimizer_step,
    pack_padded_inputs,
    packed_forward_kwargs,
    padded_forward,
    slice_for_sequence_parallel,
    trim_padding_columns,
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

__all__ = ["DataParallelPPOActor"]


def _pad_responses(values: torch.Tensor, response_length: int) -> torch.Tensor:
    """Right-pad ``(b, kept)`` per-token values with zeros to ``(b, response_length)`` (the trimmed columns)."""
    missing = response_length - values.shape[-1]
    return values if missing == 0 else torch.nn.functional.pad(values, (0, missing))


def _entropy_formula(logits: torch.Tensor) -> torch.Tensor:
    """``verl_F.entropy_from_logits`` as one formula, for ``torch.compile`` (``use_torch_compile``): compiled, one fused
    reduction over the vocabulary, forward and backward; eager, it would allocate two full-size float32 copies."""
    x = logits.float()
    return (torch.logsumexp(x, dim=-1) - (torch.softmax(x, dim=-1) * x).sum(-1)).to(logits.dtype)


def _release_host_memory(device: torch.device) -> None:
    """On CPU, hand the memory this micro batch freed back to the OS before the next allocations (see
    :func:`verl.utils.device.release_freed_host_memory`). glibc otherwise keeps the forward's freed activations in
    its heaps beside the backward's, and one micro batch's beside the next one's: on SmolLM2-135M's shape (micro
    batch 4 x 282 tokens) the update's peak fell by 0.5 GB per process, at the same speed."""
    if device.type == "cpu":
        release_freed_host_memory()


class DataParallelPPOActor(BasePPOActor):
    """PPO actor over one data-parallel shard; the reference policy when ``actor_optimizer`` is None.

    ``config`` is ``actor_rollout_ref.actor`` (or ``.ref``) after the worker's batch-size normalisation (per-GPU
    ``ppo_mini_batch_size`` in samples). ``actor_module`` is an HF causal LM, plain, FSDP1 or FSDP2-sharded.
    """

    def __init__(
        self,
        config: ActorConfig | RefConfig | DictConfig,
        actor_module: nn.Module,
        actor_optimizer: torch.optim.Optimizer | None = None,
    ):
        if not isinstance(config, ActorConfig | RefConfig):
            config = ActorConfig.from_config(config)
        super().__init__(config)
        self.actor_module = actor_module
        self.actor_optimizer = actor_optimizer
        self.use_remove_padding = config.use_remove_padding
        self.use_fused_kernels = config.use_fused_kernels
        self.ulysses_sequence_parallel_size = config.ulysses_sequence_parallel_size
        if self.ulysses_sequence_parallel_size > 1 and not self.use_remove_padding:
            raise ValueError(
                f"ulysses_sequence_parallel_size={self.ulysses_sequence_parallel_size} needs packed inputs: set "
                "actor_rollout_ref.model.use_remove_padding=True"
            )
        if self.use_fused_kernels:
            check_fusable_head(actor_module)
        if config.entropy_from_logits_with_chunking:
            # as in verl, chunking (for memory) takes precedence over compiling (for speed)
            self._entropy_fn = verl_F.entropy_from_logits_with_chunking
        elif config.use_torch_compile:
            # one fused reduction kernel, forward and backward; dynamic shapes: micro-batches vary in length
            self._entropy_fn = torch.compile(_entropy_formula, dynamic=True)
        else:
            self._entropy_fn = verl_F.entropy_from_logits
        self.device = compute_device()

    # --------------------------------------------------------------------------------------------------------
    def _entropy(self, logits: torch.Tensor) -> torch.Tensor:
        """The entropy a loss differentiates (``entropy_coeff != 0``)."""
        if self.config.entropy_checkpointing:
            return torch.utils.checkpoint.checkpoint(self._entropy_fn, logits, use_reentrant=False)
        return self._entropy_fn(logits)

    def _forward_micro_batch(
        self, micro_batch: dict, temperature: float, calculate_entropy: bool = False, entropy_grad: bool = True
    ) -> tuple[torch.Tensor | None, torch.Tensor]:
        """Per-token entropy (or None) and log-probs of ``responses``, both ``(b, response_length)``.

        micro_batch: ``input_ids``, ``attention_mask``, ``position_ids`` ``(b, seqlen)`` (mrope ``(b, 3, seqlen)``),
        ``responses`` ``(b, response_length)``, optional ``multi_modal_inputs``. Logits are divided by
        ``temperature`` before the softmax, as when sampling.
        """
        responses = micro_batch["responses"]
        response_length = responses.size(-1)
        input_ids = micro_batch["input_ids"]
        attention_mask = micro_batch["attention_mask"]
        position_ids = micro_batch["position_ids"]
        mm_kwargs = merge_multi_modal_inputs(micro_batch)
        entropy = None
        with autocast_context():
            if self.use_remove_padding:
                ids_rmpad, pos_rmpad, valid = pack_padded_inputs(input_ids, attention_mask, position_ids)
                # The logit at packed position k predicts token k+1; at a sequence's last token that label is the
                # next sequence's first token, which lands on a padded response slot and is masked later.
                labels = torch.roll(ids_rmpad, shifts=-1, dims=1)
                sp = self.ulysses_sequence_parallel_size
                ids_rmpad, pos_rmpad, labels, sp_pad = slice_for_sequence_parallel(
                    sp, ids_rmpad, pos_rmpad, labels, multi_modal=bool(mm_kwargs)
                )
                dtype = next(self.actor_module.parameters()).dtype
                kwargs = packed_forward_kwargs(self.actor_module, pos_rmpad, dtype)
                if self.use_fused_kernels:
                    with fused_output_head(self.actor_module, labels, temperature, calculate_entropy) as fused:
                        self.actor_module(input_ids=ids_rmpad, **kwargs, **mm_kwargs)
                    log_probs, token_entropy = fused.log_probs.squeeze(0), fused.entropy
                    if token_entropy is not None:
                        token_entropy = token_entropy.squeeze(0) if entropy_grad else token_entropy.squeeze(0).detach()
                else:
                    logits = self.actor_module(input_ids=ids_rmpad, **kwargs, **mm_kwargs).logits.squeeze(0)
                    logits.div_(temperature)
                    log_probs, token_entropy = self._log_probs_and_entropy(
                        logits, labels.squeeze(0), calculate_entropy, entropy_grad
                    )
                log_probs = unpack_to_padded(gather_sequence_parallel(log_probs, sp, sp_pad), valid)
                log_probs = log_probs[:, -response_length - 1 : -1]
                if calculate_entropy:
                    entropy = gather_sequence_parallel(token_entropy, sp, sp_pad)
                    entropy = unpack_to_padded(entropy, valid)[:, -response_length - 1 : -1]
            elif self.use_fused_kernels:
                entropy, log_probs = self._fused_padded_forward(
                    micro_batch, mm_kwargs, temperature, calculate_entropy, entropy_grad
                )
            else:
                output, kept = padded_forward(
                    self.actor_module,
                    input_ids,
                    attention_mask,
                    position_ids,
                    response_length,
                    response_logits_only=True,
                    **mm_kwargs,
                )
                logits = output.logits
                logits.div_(temperature)
                logits = logits[:, -kept - 1 : -1, :]  # the positions that predict each (kept) response token
                log_probs, entropy = self._log_probs_and_entropy(
                    logits, responses[:, :kept], calculate_entropy, entropy_grad
                )
                log_probs = _pad_responses(log_probs, response_length)
                if calculate_entropy:
                    entropy = _pad_responses(entropy, response_length)
        return entropy, log_probs

    def _log_probs_and_entropy(
        self, logits: torch.Tensor, labels: torch.Tensor, calculate_entropy: bool, entropy_grad: bool
    ) -> tuple[torch.Tensor, torch.Tensor | None]:
        """Log-probs of ``labels`` and, when asked, the entropy. An entropy no loss differentiates (a metric, or any
        no-grad pass) comes from the log-probs' own pass over the vocabulary (``logprobs_and_entropy_from_logits``);
        on SmolLM2-135M's shape that took 0.25 s against 0.14 s plus a compiled entropy's 0.33-1.3 s."""
        if not calculate_entropy:
            return verl_F.logprobs_from_logits(logits, labels), None
        if not (entropy_grad and torch.is_grad_enabled()):
            return verl_F.logprobs_and_entropy_from_logits(logits, labels)
        return verl_F.logprobs_from_logits(logits, labels), self._entropy(logits)

    def _fused_padded_forward(
        self, micro_batch: dict, mm_kwargs: dict, temperature: float, calculate_entropy: bool, entropy_grad: bool
    ) -> tuple[torch.Tensor | None, torch.Tensor]:
        """``_forward_micro_batch`` on padded inputs with the fused log-prob head (``use_fused_kernels``): the head
        computes the kept response tokens' log-probs (and entropy) from the hidden states, no logits built."""
        responses = micro_batch["responses"]
        response_length = responses.size(-1)
        input_ids, attention_mask, position_ids, kept = trim_padding_columns(
            micro_batch["input_ids"], micro_batch["attention_mask"], micro_batch["position_ids"], response_length
        )
        labels = responses[:, :kept]
        with fused_output_head(self.actor_module, labels, temperature, calculate_entropy, kept) as fused:
            padded_forward(
                self.actor_module, input_ids, attention_mask, position_ids, kept, response_logits_only=True, **mm_kwargs
            )
        entropy = None
        if calculate_entropy:
            entropy = _pad_responses(fused.entropy if entropy_grad else fused.entropy.detach(), response_length)
        return entropy, _pad_responses(fused.log_probs, response_length)

    def _optimizer_step(self) -> torch.Tensor:
        """Clip gradients to ``grad_clip`` and step the optimizer (skipped when the norm is not finite)."""
        return optimizer_step(self.actor_module, self.actor_optimizer, self.config.grad_clip)

    # --------------------------------------------------------------------------------------------------------
    def compute_log_prob(
        self, data: DataProto, calculate_entropy: bool = False
    ) -> tuple[torch.Tensor, torch.Tensor | None]:
        """Log-probs (and entropies) of ``responses`` under the current weights, no grad; each ``(bs, T)``.

        meta_info: ``micro_batch_size``, ``temperature``, ``use_dynamic_bsz``, ``max_token_len`` (dynamic only).
        Returns a tuple (verl's base class documents a tensor; the worker unpacks a tuple).
        """
        self.actor_module.eval()
        meta = data.meta_info
        use_dynamic_bsz = meta.get("use_dynamic_bsz", False)
        max_token_len = meta.get("max_token_len")
        if use_dynamic_bsz and max_token_len is not None:
            max_token_len = max_token_len * self.ulysses_sequence_parallel_size
        select_keys = ["responses", "input_ids", "attention_mask", "position_ids"]
        micro_batches, partitions = make_micro_batches(
            data, select_keys, meta.get("micro_batch_size"), use_dynamic_bsz, max_token_len
        )
        temperature = meta["temperature"]
        log_probs_list, entropy_list = [], []
        for micro_batch in micro_batches:
            with torch.no_grad():
                entropy, log_probs = self._forward_micro_batch(
                    to_device(micro_batch, self.device), temperature=temperature, calculate_entropy=calculate_entropy
                )
            log_probs_list.append(log_probs)
            if calculate_entropy:
                entropy_list.append(entropy)
            _release_host_memory(self.device)
        log_probs = restore_order(torch.cat(log_probs_list, dim=0), partitions)
        entropys = restore_order(torch.cat(entropy_list, dim=0), partitions) if calculate_entropy else None
        return log_probs, entropys

    def _training_attention(self):
        """See :func:`verl.workers.engine.fsdp.cpu_attention.training_attention`."""
        return training_attention(self.actor_module, self.device, self.ulysses_sequence_parallel_size)

    def update_policy(self, data: DataProto) -> dict[str, list]:
        """PPO update over ``ppo_epochs`` x mini batches, one optimizer step per mini batch; returns metric lists.

        batch: ``responses, input_ids, attention_mask, position_ids, old_log_probs, advantages`` (+ ``ref_log_prob``
        with ``use_kl_loss``, + ``loss_mask`` when ``meta_info["multi_turn"]``). meta_info: ``temperature``
        (required: KeyError otherwise, so a log-prob/update temperature mismatch cannot pass silently).

        Without ``old_log_probs`` the update is *on-policy*: one epoch over one mini batch, so the policy that
        sampled is the one being updated, and the old log-probs are this forward's own, detached (the ratio is 1,
        the gradient that of ``-A * log_prob``). That saves the separate log-prob pass; ``actor/entropy`` is then
        measured here.
        """
        if self.actor_optimizer is None:
            raise RuntimeError("update_policy needs an optimizer: this actor was built as a reference policy")
        with self._training_attention():
            return self._update_policy(data)

    def _update_policy(self, data: DataProto) -> dict[str, list]:
        self.actor_module.train()
        cfg = self.config
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
        keep_non_tensor = ["multi_modal_inputs"] if "multi_modal_inputs" in data.non_tensor_batch else []
        data = data.select(batch_keys=select_keys, non_tensor_batch_keys=keep_non_tensor)

        mini_batch_size = cfg.ppo_mini_batch_size
        use_dynamic_bsz = cfg.use_dynamic_bsz
        micro_batch_size = cfg.ppo_micro_batch_size_per_gpu
        max_token_len = cfg.ppo_max_token_len_per_gpu * self.ulysses_sequence_parallel_size
        entropy_coeff = cfg.entropy_coeff
        loss_agg_mode = cfg.loss_agg_mode
        # every mode, vanilla included, through the registry: a recipe may register (or replace) any of them
        policy_loss_fn = get_policy_loss_fn(cfg.policy_loss.loss_mode)

        metrics: dict[str, list] = {}
        for _ in range(cfg.ppo_epochs):
            for mini_batch in data.split(mini_batch_size):
                micro_batches, _ = make_micro_batches(
                    mini_batch, select_keys, micro_batch_size, use_dynamic_bsz, max_token_len
                )
                if not use_dynamic_bsz:
                    self.gradient_accumulation = gradient_accumulation_steps(mini_batch_size, micro_batch_size, "actor")
                self.actor_optimizer.zero_grad()
                for micro_batch in micro_batches:
                    micro_batch = to_device(micro_batch, self.device)
                    response_length = micro_batch["responses"].size(-1)
                    if multi_turn:
                        response_mask = micro_batch["loss_mask"][:, -response_length:]
                    else:
                        response_mask = micro_batch["attention_mask"][:, -response_length:]
                    advantages = micro_batch["advantages"]
                    calculate_entropy = entropy_coeff != 0
                    # on-policy: the entropy metric the skipped log-prob pass would have given comes from here
                    entropy, log_prob = self._forward_micro_batch(
                        micro_batch, temperature, calculate_entropy or on_policy, entropy_grad=calculate_entropy
                    )
                    old_log_prob = log_prob.detach() if on_policy else micro_batch["old_log_probs"]

                    pg_loss, pg_clipfrac, ppo_kl, pg_clipfrac_lower = policy_loss_fn(
                        old_log_prob, log_prob, advantages, response_mask, loss_agg_mode, cfg
                    )
                    step_metrics = {
                        "actor/pg_loss": to_float(pg_loss),
                        "actor/pg_clipfrac": to_float(pg_clipfrac),
                        "actor/ppo_kl": to_float(ppo_kl),
                        "actor/pg_clipfrac_lower": to_float(pg_clipfrac_lower),
                    }
                    policy_loss = pg_loss
                    if calculate_entropy:
                        entropy_loss = agg_loss(loss_mat=entropy, loss_mask=response_mask, loss_agg_mode=loss_agg_mode)
                        policy_loss = policy_loss - entropy_coeff * entropy_loss
                        step_metrics["actor/entropy"] = to_float(entropy_loss)
                    elif on_policy:
                        entropy_metric = agg_loss(entropy, response_mask, loss_agg_mode)
                        step_metrics["actor/entropy"] = to_float(entropy_metric)
                    if use_kl_loss:
                        kld = kl_penalty(log_prob, micro_batch["ref_log_prob"], cfg.kl_loss_type)
                        kl_loss = agg_loss(loss_mat=kld, loss_mask=response_mask, loss_agg_mode=loss_agg_mode)
                        kl_coef = cfg.kl_loss_coef
                        policy_loss = policy_loss + kl_coef * kl_loss
                        step_metrics["actor/kl_loss"] = to_float(kl_loss)
                        step_metrics["actor/kl_coef"] = kl_coef

                    if use_dynamic_bsz:
                        # Micro batches differ in size: weight each by its share of the mini batch.
                        loss = policy_loss * (response_mask.shape[0] / mini_batch_size)
                    else:
                        loss = policy_loss / self.gradient_accumulation
                    _release_host_memory(self.device)  # the forward's freed temporaries, before the backward's
                    loss.backward()
                    append_metrics(metrics, step_metrics)
                    _release_host_memory(self.device)
                grad_norm = self._optimizer_step()
                append_metrics(metrics, {"actor/grad_norm": to_float(grad_norm)})
        self.actor_optimizer.zero_grad()
        return metrics
