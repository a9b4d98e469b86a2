"""Building the FSDP engine's parts: device meshes, HF model loading, LoRA, FSDP1/FSDP2 wrapping, optimizer and LR
scheduler.

``build_fsdp_model`` is the one path by which actor, reference, critic and reward model get their FSDP-wrapped
module (from :func:`verl.workers.engine.pretrained.load_pretrained`'s files); the roles differ only in the arguments
they pass.
"""

from __future__ import annotations

import logging

import torch
import torch.distributed as dist
from omegaconf import OmegaConf

from verl.utils.device import get_device_name, is_accelerator_available
from verl.utils.fsdp_utils import (
    get_init_weight_context_manager,
)
from verl.utils.torch_dtypes import PrecisionType
from verl.workers.config import FSDPConfig, OptimConfig
from verl.workers.engine.fsdp.activation_checkpointing import ActivationCheckpointing
from verl.workers.engine.pretrained import PretrainedFiles

logger = logging.getLogger(__name__)


def create_device_mesh(world_size: int, fsdp_size: int):
    """1-D ``("fsdp",)`` mesh, or 2-D ``("ddp", "fsdp")`` (hybrid sharding) when ``0 < fsdp_size < world_size``."""
    from torch.distributed.device_mesh import init_device_mesh

    device = get_device_name()
    if fsdp_size < 0 or fsdp_size >= world_size:
        return init_device_mesh(device, mesh_shape=(world_size,), mesh_dim_names=("fsdp",))
    if world_size % fsdp_size != 0:
        raise ValueError(f"fsdp_config.fsdp_size={fsdp_size} must divide the world size {world_size}")
    return init_device_mesh(device, mesh_shape=(world_size // fsdp_size, fsdp_size), mesh_dim_names=("ddp", "fsdp"))


def ulysses_sharding_manager(world_size: int, sp_size: int):
    """The Ulysses sharding manager of a worker: over a ``(world_size // sp_size, sp_size)`` mesh named
    ``("dp", "sp")``, or a no-op one (no mesh) when ``sp_size == 1``.

    The FSDP mesh stays over all ranks; the SP ranks of one ``dp`` row share the rows of a batch: DP_COMPUTE_PROTO
    dispatch still sends every rank its own chunk, and the manager's ``preprocess_data`` all-gathers the chunks of the
    group (``postprocess_data`` hands each rank its own rows back), so the driver needs no SP-aware dispatch.
    """
    from verl.workers.sharding_manager import FSDPUlyssesShardingManager

    if sp_size == 1:
        return FSDPUlyssesShardingManager(None)
    from torch.distributed.device_mesh import init_device_mesh

    if world_size % sp_size != 0:
        raise ValueError(f"ulysses_sequence_parallel_size={sp_size} must divide the world size {world_size}")
    mesh = init_device_mesh(get_device_name(), (world_size // sp_size, sp_size), mesh_dim_names=("dp", "sp"))
    return FSDPUlyssesShardingManager(mesh)


def model_dtype(fsdp_config, is_trainable: bool) -> torch.dtype:
    """Parameter dtype: ``fsdp_config.model_dtype`` if set; else fp32 for trained models (the optimizer needs fp32
    masters) and on CPU (bf16 is emulated there), bf16 for frozen models on accelerators."""
    name = fsdp_config.model_dtype if fsdp_config is not None else None
    if name is not None:
        return PrecisionType.to_dtype(name)
    if is_trainable or not is_accelerator_available():
        return torch.float32
    return torch.bfloat16


def attn_implementation(hf_config=None) -> str:
    """flash_attention_2 where the package is there (GPU), else PyTorch's sdpa; eager for a model whose attention
    logits are soft-capped (Gemma 2), which sdpa silently skips: its log-probs would not be the model's."""
    if is_accelerator_available():
        try:
            import flash_attn  # noqa: F401

            return "flash_attention_2"
        except ImportError:
            pass
    text_config = hf_config.get_text_config() if hasattr(hf_config, "get_text_config") else hf_config
    if getattr(text_config, "attn_logit_softcapping", None):
        return "eager"
    return "sdpa"


def load_hf_model(auto_cls, local_path: str, hf_config, dtype: torch.dtype, trust_remote_code: bool, mesh):
    """Rank 0 reads the weights; other ranks build an empty (meta) model that FSDP fills by broadcast."""
    rank = dist.get_rank() if dist.is_initialized() else 0
    attn = attn_implementation(hf_config)
    if rank == 0:
        return auto_cls.from_pretrained(
            local_path, config=hf_config, dtype=dtype, trust_remote_code=trust_remote_code, attn_implementation=attn
        )
    # tied embeddings cannot be rebuilt from meta tensors: build real (random) weights, replaced by rank 0's
    init_context = get_init_weight_context_manager(use_meta_tensor=not hf_config.tie_word_embeddings, mesh=mesh)
    with init_context():
        model = auto_cls.from_config(hf_config, dtype=dtype, trust_remote_code=trust_remote_code)
    model.config._attn_implementation = attn
    return model


def apply_lora(module, model_config, task_type: str = "CAUSAL_LM"):
    """Wrap ``module`` with PEFT LoRA adapters: new ones (``lora_rank``, ``lora_alpha``, ``target_modules``, minus
    ``exclude_modules``), or the saved adapter at ``lora_adapter_path``, loaded trainable with its own settings."""
    from peft import LoraConfig, PeftModel, TaskType, get_peft_model

    module.enable_input_require_grads()
    adapter_path = getattr(model_config, "lora_adapter_path", None)
    if adapter_path:
        from verl.utils.fs import copy_to_local

        local = copy_to_local(adapter_path, use_shm=getattr(model_config, "use_shm", False))
        model = PeftModel.from_pretrained(module, local, is_trainable=True)
        saved = model.peft_config["default"]
        logger.info(
            "LoRA adapter from %s: rank %s, alpha %s, target modules %s (its own settings; model.lora_rank etc. are "
            "not applied)",
            adapter_path,
            saved.r,
            saved.lora_alpha,
            saved.target_modules,
        )
        return model
    lora_config = LoraConfig(
        task_type=getattr(TaskType, task_type),
        r=model_config.lora_rank,
        lora_alpha=model_config.lora_alpha,
        target_modules=_module_names(model_config.target_modules),
        exclude_modules=_module_names(getattr(model_config, "exclude_modules", None)),
        bias="none",
    )
    return get_peft_model(module, lora_config)


def _module_names(value):
    """A YAML module selector for PEFT: a string (``all-linear`` or a regex) as is, a list as a plain list."""
    if isinstance(value, list | tuple) or OmegaConf.is_list(value):
        return list(value)
    return value


# the dtypes torch's fused AdamW kernel takes on CPU
_FUSED_ADAMW_CPU_DTYPES = (torch.float64, torch.float32, torch.float16, torch.bfloat16)


def cpu_fused_adamw(params: list[torch.Tensor]) -> dict:
    """``{"fused": True}`` when every parameter is a CPU tensor of a dtype torch's fused AdamW takes, else ``{}``
    (torch's own choice: for-each on accelerators, a per-tensor loop on CPU).

    On CPU torch does not pick the fused kernel by itself, and its per-tensor loop re-reads every parameter and
    moment several times: one step of SmolLM2-135M's shape took 3.9 CPU seconds against 0.46 fused (25M: 0.60
    against 0.10; 2 threads). Same update up to float rounding (FSDP2's DTensor shards included); TRL's default
    ``optim="adamw_torch_fused"`` is the same kernel."""
    if params and all(p.device.type == "cpu" and p.dtype in _FUSED_ADAMW_CPU_DTYPES for p in params):
        return {"fused": True}
    return {}


def optimizer_class(optim_config: OptimConfig) -> type:
    """The class ``optim.optimizer`` names in the module ``optim.optimizer_impl`` (torch.optim's AdamW by default)."""
    import importlib

    try:
        module = importlib.import_module(optim_config.optimizer_impl)
    except ImportError as exc:
        raise ValueError(
            f"optim.optimizer_impl={optim_config.optimizer_impl!r} cannot be imported ({exc}); install it or use "
            "torch.optim"
        ) from exc
    cls = getattr(module, optim_config.optimizer, None)
    if not isinstance(cls, type) or not issubclass(cls, torch.optim.Optimizer):
        raise ValueError(
            f"optim.optimizer={optim_config.optimizer!r} is not an optimizer class of {optim_config.optimizer_impl} "
            "(e.g. AdamW)"
        )
    return cls


def build_optimizer(module: torch.nn.Module, optim_config: OptimConfig):
    """The optimizer ``optim.optimizer_impl``.``optim.optimizer`` names (lr, weight_decay, betas for the Adam family,
    then ``override_optimizer_config``) and the warmup scheduler ``optim.lr_scheduler_type`` names (constant or
    cosine)."""
    from verl.utils.torch_functional import get_constant_schedule_with_warmup, get_cosine_schedule_with_warmup

    params = [p for p in module.parameters() if p.requires_grad]
    cls = optimizer_class(optim_config)
    kwargs = {"lr": optim_config.lr, "weight_decay": optim_config.weight_decay}
    if "adam" in optim_config.optimizer.lower():  # the moment estimates' decay rates (verl passes them alike)
        kwargs["betas"] = tuple(optim_config.betas)
    if cls is torch.optim.AdamW:
        kwargs.update(cpu_fused_adamw(params))
    kwargs.update(optim_config.override_optimizer_config or {})
    optimizer = cls(params, **kwargs)
    total_steps = optim_config.total_training_steps
    warmup_steps = optim_config.warmup_steps()
    style = optim_config.lr_scheduler_type
    if style == "constant":
        scheduler = get_constant_schedule_with_warmup(optimizer, num_warmup_steps=warmup_steps)
    elif style == "cosine":
        if total_steps <= 0:
            raise ValueError(
                "optim.lr_scheduler_type=cosine needs optim.total_training_steps > 0 (the trainer sets it)"
            )
        scheduler = get_cosine_schedule_with_warmup(
            optimizer,
            num_warmup_steps=warmup_steps,
            num_training_steps=total_steps,
            min_lr_ratio=optim_config.min_lr_ratio or 0.0,
            num_cycles=optim_config.num_cycles,
            zero_indexed_step=optim_config.zero_indexed_step,
        )
    else:
        raise ValueError(f"optim.lr_scheduler_type={style!r} is not supported; expected 'constant' or 'cosine'")
    return optimizer, scheduler


def build_fsdp_model(
    auto_cls,
    files: PretrainedFiles,
    *,
    strategy: str,
    fsdp_config: FSDPConfig,
    device_mesh,
    trainable: bool,
    trust_remote_code: bool = False,
    gradient_checkpointing: ActivationCheckpointing | None = None,
    lora_config=None,
    lora_task_type: str = "CAUSAL_LM",
    cpu_offload: bool | None = None,
    ulysses_sp_size: int = 1,
    liger_key: str | None = None,
) -> torch.nn.Module:
    """Load ``files`` with ``auto_cls`` and shard it with FSDP1/FSDP2 (``strategy``) over ``device_mesh``.

    ``trainable`` picks the parameter dtype (fp32 masters for the optimizer) and whether activations are
    checkpointed (by ``gradient_checkpointing``, when given); ``lora_config`` (with ``lora_rank``, ``lora_alpha``,
    ``target_modules``) wraps the model with PEFT adapters first. ``cpu_offload``: None leaves it to
    ``fsdp_config.offload_policy``; frozen models pass True.
    ``ulysses_sp_size > 1`` patches attention for Ulysses sequence parallelism (packed inputs only).
    ``liger_key``: the ``use_liger`` key that is True for this model (Liger's kernels go in before LoRA and
    wrapping), or None.
    """
    from verl.utils.fsdp_utils import wrap_model_for_training

    dtype = model_dtype(fsdp_config, is_trainable=trainable)
    module = load_hf_model(auto_cls, files.local_path, files.hf_config, dtype, trust_remote_code, device_mesh)
    if liger_key is not None:
        from verl.models.transformers.liger import apply_liger_kernels

        apply_liger_kernels(module, liger_key, fused_linear_cross_entropy=False)
    if ulysses_sp_size > 1:
        from verl.models.transformers.monkey_patch import apply_monkey_patch

        apply_monkey_patch(module, ulysses_sp_size=ulysses_sp_size, use_remove_padding=True)
    if trainable and gradient_checkpointing is not None:
        gradient_checkpointing.enable(module)
    if lora_config is not None:
        module = apply_lora(module, lora_config, task_type=lora_task_type)
    return wrap_model_for_training(
        module,
        strategy,
        device_mesh,
        fsdp_config=fsdp_config,
        mixed_precision_config=fsdp_config.mixed_precision,
        cpu_offload=cpu_offload,
        is_lora=lora_config is not None,
    )
