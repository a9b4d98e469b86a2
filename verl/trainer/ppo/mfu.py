"""MFU of every phase of a step: the FLOPs the phase computed, per second, over the peak of the devices it ran on.

FLOPs are counted on the tokens each sequence really has (``meta_info["global_token_num"]``: packed, not padded),
with the parameter and attention terms of the policy's architecture (``FlopsCounter``). A phase makes a number of
passes over those tokens: 1 for a forward (log-probs, reference, values), 3 for forward + backward (updates, times
``ppo_epochs``), and generation with a KV cache computes about one forward over prompt + response. The peak is one
GPU's datasheet figure times the GPUs, or on CPU this host's measured GEMM peak (``verl.utils.peak_flops``) in the
compute dtype on all its cores (the workers share the host), times the nodes.
"""

from __future__ import annotations

import logging

import torch

logger = logging.getLogger(__name__)

__all__ = ["MFU_PHASES", "PhaseMFU", "compute_mfu_metrics"]

# phase (timing_raw key) -> passes over every token of the batch
MFU_PHASES = {"gen": 1, "old_log_prob": 1, "ref": 1, "values": 1, "update_actor": 3, "update_critic": 3}


def compute_mfu_metrics(
    batch, timing_raw: dict[str, float], flops_counter, peak_flops: float, ppo_epochs: int = 1
) -> dict[str, float]:
    """``perf/achieved_tflops/{phase}`` and ``perf/mfu/{phase}`` for the timed phases; ``peak_flops``: all devices."""
    seqlens = batch.meta_info["global_token_num"]
    forward_flops = flops_counter.estimate_flops(seqlens, 1.0)[0] * 1e12 / 3  # the counter counts fwd + bwd
    metrics = {"perf/peak_tflops": peak_flops / 1e12}
    for phase, passes in MFU_PHASES.items():
        seconds = timing_raw.get(phase)
        # a phase under a millisecond did not compute (e.g. old log-probs reused on-policy): no rate to report
        if not seconds or seconds < 1e-3 or forward_flops <= 0:
            continue
        epochs = ppo_epochs if phase.startswith("update") else 1
        achieved = forward_flops * passes * epochs / seconds
        metrics[f"perf/achieved_tflops/{phase}"] = achieved / 1e12
        metrics[f"perf/mfu/{phase}"] = achieved / peak_flops
    return metrics


def _compute_dtype(ppo_config, device: str) -> torch.dtype:
    """The dtype the policy's matmuls run in: the actor's mixed-precision param dtype, else fp32 on CPU, bf16 on GPU."""
    from verl.utils.torch_dtypes import PrecisionType

    mixed = ppo_config.actor_rollout_ref.actor.fsdp_config.mixed_precision or {}
    if "param_dtype" in mixed:
        return PrecisionType.to_dtype(mixed["param_dtype"])
    return torch.float32 if device == "cpu" else torch.bfloat16


class PhaseMFU:
    """Built once per run (the model's config and the peak); ``metrics(batch, timing_raw)`` per step."""

    def __init__(self, flops_counter, peak, devices: int, ppo_epochs: int):
        self.flops_counter, self.peak, self.devices, self.ppo_epochs = flops_counter, peak, devices, ppo_epochs
        self.peak_flops = peak.flops * devices

    @classmethod
    def build(cls, ppo_config, model_path: str) -> PhaseMFU | None:
        """None (with a warning) where the peak or the model's FLOPs cannot be known."""
        from transformers import AutoConfig

        from verl.utils.device import get_device_name
        from verl.utils.flops_counter import FlopsCounter
        from verl.utils.peak_flops import device_peak

        trainer = ppo_config.trainer
        device = get_device_name() if trainer.device == "auto" else trainer.device
        try:
            hf_config = AutoConfig.from_pretrained(
                model_path, trust_remote_code=ppo_config.actor_rollout_ref.model.trust_remote_code
            )
            peak = device_peak(device, _compute_dtype(ppo_config, device))
        except Exception as e:  # noqa: BLE001 - MFU is a report, never a reason to stop a run
            logger.warning("no MFU metrics: %s: %s", type(e).__name__, e)
            return None
        if peak is None:
            logger.warning("no MFU metrics: the accelerator's peak FLOP/s is not in verl.utils.flops_counter's table")
            return None
        devices = trainer.nnodes if device == "cpu" else trainer.n_gpus_per_node * trainer.nnodes
        logger.info("MFU peak: %.3f TFLOP/s x %d (%s)", peak.flops / 1e12, devices, peak.source)
        return cls(FlopsCounter(hf_config), peak, devices, ppo_config.actor_rollout_ref.actor.ppo_epochs)

    def metrics(self, batch, timing_raw: dict[str, float]) -> dict[str, float]:
        return compute_mfu_metrics(batch, timing_raw, self.flops_counter, self.peak_flops, self.ppo_epochs)
