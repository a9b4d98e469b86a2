"""A role's ``megatron`` block (``ppo_megatron_trainer.yaml``) and what of it the Megatron engine honours.

Light (no megatron-core import): the driver's config check runs :func:`check_megatron_settings` before Ray starts, and
the engine runs it again when it builds.
"""

from __future__ import annotations

from verl.utils.config import omega_conf_to_dataclass
from verl.workers.config import MegatronConfig

__all__ = ["check_megatron_settings", "megatron_settings"]


def megatron_settings(section) -> MegatronConfig:
    """A role section's ``megatron`` block as a typed :class:`MegatronConfig` (defaults where absent)."""
    block = getattr(section, "megatron", None)
    if block is None and hasattr(section, "extra"):
        block = section.extra.get("megatron")
    if block is None:
        return MegatronConfig()
    if isinstance(block, MegatronConfig):
        return block
    return omega_conf_to_dataclass(block, MegatronConfig)


def check_megatron_settings(settings: MegatronConfig, key: str, world_size: int, trainable: bool = True) -> None:
    """Raise ValueError for a ``megatron`` setting this engine cannot honour, naming ``key.<setting>`` and what to
    set instead (the driver's config check runs the same function before Ray starts). A frozen model
    (``trainable=False``: reference) has no optimizer, so its optimizer settings do not matter."""
    tp, pp = settings.tensor_model_parallel_size, settings.pipeline_model_parallel_size
    problems = []
    if tp < 1 or pp < 1 or world_size % (tp * pp) != 0:
        problems.append(
            f"{key}.tensor_model_parallel_size={tp} x pipeline_model_parallel_size={pp} must divide the number of "
            f"workers ({world_size})"
        )
    if settings.context_parallel_size != 1:
        # measured with megatron-core 0.16.1: the local layer spec's DotProductAttention asserts context_parallel_size
        # == 1 when it is built; only TransformerEngine's attention splits sequences, and TE is CUDA-only
        problems.append(
            f"{key}.context_parallel_size={settings.context_parallel_size}: megatron-core runs context parallelism "
            "only in TransformerEngine's attention (TEDotProductAttention), and TransformerEngine is CUDA-only; its "
            "local attention, which this engine builds, refuses context_parallel_size > 1. Set it to 1"
        )
    vpp = settings.virtual_pipeline_model_parallel_size
    if vpp is not None and (vpp < 1 or (vpp > 1 and pp == 1)):
        problems.append(
            f"{key}.virtual_pipeline_model_parallel_size={vpp}: model chunks per pipeline stage need "
            f"pipeline_model_parallel_size > 1 (it is {pp}); set it to null"
        )
    ep = settings.expert_model_parallel_size
    if ep < 1 or (world_size // max(tp * pp, 1)) % ep:
        problems.append(
            f"{key}.expert_model_parallel_size={ep} must divide the data-parallel size ({world_size} workers / "
            f"tensor {tp} x pipeline {pp})"
        )
    if settings.expert_tensor_parallel_size not in (None, 1):
        problems.append(
            f"{key}.expert_tensor_parallel_size={settings.expert_tensor_parallel_size}: experts are split over "
            "expert-parallel ranks only here; set it to null"
        )
    if ep > 1 and trainable and settings.use_distributed_optimizer:
        problems.append(
            f"{key}.use_distributed_optimizer=True with expert_model_parallel_size={ep}: the distributed optimizer "
            f"here slices over the data-parallel group, which mixes different experts; set "
            f"{key}.use_distributed_optimizer=False"
        )
    # sequence_parallel: honoured at tensor_model_parallel_size > 1 (megatron-core's, with the engine's own norms and
    # sequence padding, see verl.workers.engine.megatron.model); ignored at 1, where there is nothing to split over
    # param_offload / grad_offload / optimizer_offload: the engine keeps everything in host memory (CPU) already, so
    # they hold with nothing to move (as the FSDP engine's offload guard on CPU); see MegatronEngine.resident
    if settings.use_dist_checkpointing and not settings.dist_checkpointing_path:
        problems.append(
            f"{key}.use_dist_checkpointing=True starts the model from the megatron-core distributed checkpoint at "
            f"{key}.dist_checkpointing_path, which is not set: set it (a checkpoint's dist_ckpt/ folder, e.g. "
            f"global_step_N/actor/dist_ckpt) or set {key}.use_dist_checkpointing=False to load model.path"
        )
    if problems:
        raise ValueError("; ".join(problems))
