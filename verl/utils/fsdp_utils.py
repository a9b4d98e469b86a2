"""FSDP helpers: FSDP2 (``fully_shard``) on CPU and accelerators, FSDP1 on accelerators, offload, full state dicts.

FSDP1 refuses to run without an accelerator, so ``strategy=fsdp`` means FSDP1 where there is one and FSDP2 on a
CPU-only machine; :func:`wrap_model_for_training` takes that decision in one place.
"""

from __future__ import annotations

import contextlib
import functools
import logging
from collections.abc import Callable, Iterable

import torch
import torch.distributed as dist
import torch.nn as nn
from torch.distributed.checkpoint.state_dict import StateDictOptions, set_model_state_dict
from torch.distributed.fsdp import (
    CPUOffload,
    CPUOffloadPolicy,
    FSDPModule,
    FullStateDictConfig,
    MixedPrecision,
    MixedPrecisionPolicy,
    ShardingStrategy,
    StateDictType,
    fully_shard,
)
from torch.distributed.fsdp import FullyShardedDataParallel as FSDP
from torch.distributed.fsdp.wrap import (
    _or_policy,
    lambda_auto_wrap_policy,
    size_based_auto_wrap_policy,
    transformer_auto_wrap_policy,
)
from torch.distributed.tensor import DTensor

from verl.utils.device import get_device_id, get_device_name, get_torch_device, is_accelerator_available

logger = logging.getLogger(__name__)

__all__ = [
    "CPUOffloadPolicy",
    "FSDP2Accumulation",
    "FSDPModule",
    "MixedPrecisionPolicy",
    "apply_fsdp2",
    "clip_grad_norm_",
    "fsdp2_clip_grad_norm_",
    "fsdp2_full_params",
    "fsdp2_load_full_state_dict",
    "fsdp_version",
    "fully_shard",
    "get_fsdp_full_state_dict",
    "get_fsdp_state_ctx",
    "get_fsdp_wrap_policy",
    "get_init_weight_context_manager",
    "get_sharding_strategy",
    "init_fn",
    "load_fsdp_model_to_gpu",
    "load_fsdp_optimizer",
    "offload_fsdp_model_to_cpu",
    "offload_fsdp_optimizer",
    "wrap_model_for_training",
]

_DTYPES = {
    "bf16": torch.bfloat16,
    "bfloat16": torch.bfloat16,
    "fp16": torch.float16,
    "float16": torch.float16,
    "half": torch.float16,
    "fp32": torch.float32,
    "float32": torch.float32,
    "float": torch.float32,
}


def _to_dtype(value, key: str) -> torch.dtype:
    """A torch dtype from a config value such as ``"bf16"``, ``"float32"`` or a ``torch.dtype``."""
    if isinstance(value, torch.dtype):
        return value
    name = str(value).lower().removeprefix("torch.")
    if name not in _DTYPES:
        raise ValueError(f"{key}={value!r} is not a known dtype; expected one of {sorted(_DTYPES)}")
    return _DTYPES[name]


def _current_device() -> torch.device:
    """The device this process computes on (``cpu`` on a CPU-only machine)."""
    if not is_accelerator_available():
        return torch.device("cpu")
    return torch.device(get_device_name(), get_device_id())


def _rank() -> int:
    return dist.get_rank() if dist.is_available() and dist.is_initialized() else 0


# ------------------------------------------------------------------------------------------------------------
# initialisation
# ------------------------------------------------------------------------------------------------------------
def init_fn(x: nn.Module) -> nn.Module:
    """FSDP1 ``param_init_fn``: ranks other than 0 allocate empty device storage (rank 0's weights are broadcast)."""
    if _rank() != 0:
        x = x.to_empty(device=_current_device(), recurse=False)
        if is_accelerator_available():
            get_torch_device().empty_cache()
    return x


@contextlib.contextmanager
def _meta_parameters():
    """Create parameters on the meta device; buffers stay real (rotary caches are not in the state dict)."""
    original = nn.Module.register_parameter

    def register_parameter(module, name, param):
        original(module, name, param)
        if param is not None:
            module._parameters[name] = nn.Parameter(param.to("meta"), requires_grad=param.requires_grad)

    nn.Module.register_parameter = register_parameter
    try:
        yield
    finally:
        nn.Module.register_parameter = original


def get_init_weight_context_manager(use_meta_tensor: bool = True, mesh=None) -> Callable:
    """A zero-argument factory of the context to build a model in: meta parameters on ranks that get a broadcast.

    Rank 0 (or the first rank of each shard group when ``mesh`` is given) builds real CPU weights.
    """
    if not use_meta_tensor:
        return functools.partial(torch.device, "cpu")
    if mesh is None:
        builds_real = _rank() == 0
    else:
        builds_real = mesh.get_coordinate()[-1] == 0
    return functools.partial(torch.device, "cpu") if builds_real else _meta_parameters


# ------------------------------------------------------------------------------------------------------------
# wrap policies and strategies
# ------------------------------------------------------------------------------------------------------------
def get_sharding_strategy(device_mesh) -> ShardingStrategy:
    """FSDP1 strategy for a mesh: 1-D -> FULL_SHARD, 2-D ``("ddp", "fsdp")`` -> HYBRID_SHARD."""
    if device_mesh.ndim == 1:
        return ShardingStrategy.FULL_SHARD
    if device_mesh.ndim == 2:
        return ShardingStrategy.HYBRID_SHARD
    raise NotImplementedError(f"device_mesh.ndim={device_mesh.ndim}: only 1-D and 2-D meshes are supported")


def _module_class_by_name(model: nn.Module, name: str) -> type | None:
    for module in model.modules():
        if type(module).__name__ == name:
            return type(module)
    return None


def _layer_class_names(model: nn.Module, config) -> list[str]:
    names = config.get("transformer_layer_cls_to_wrap", None) if config is not None else None
    if names is None:
        names = getattr(model, "_no_split_modules", None) or []
    if isinstance(names, str):
        names = [names]
    return list(names)


def get_fsdp_wrap_policy(module: nn.Module, config=None, is_lora: bool = False):
    """FSDP1 auto-wrap policy from a ``wrap_policy`` config section (None when ``disable`` is set).

    LoRA adds a policy that wraps leaf modules with trainable weights; ``min_num_params > 0`` wraps by size;
    otherwise the classes in ``transformer_layer_cls_to_wrap`` (default ``module._no_split_modules``) are wrapped.
    """
    config = {} if config is None else config
    if config.get("disable", False):
        return None
    policies = []
    if is_lora:

        def trainable_leaf(m: nn.Module) -> bool:
            weight = getattr(m, "weight", None)
            return len(list(m.children())) == 0 and weight is not None and weight.requires_grad

        policies.append(functools.partial(lambda_auto_wrap_policy, lambda_fn=trainable_leaf))
    min_num_params = config.get("min_num_params", 0) or 0
    if min_num_params > 0:
        policies.append(functools.partial(size_based_auto_wrap_policy, min_num_params=min_num_params))
    else:
        classes = set()
        for name in _layer_class_names(module, config):
            cls = _module_class_by_name(module, name)
            if cls is None:
                raise Exception(f"transformer_layer_cls_to_wrap: could not find the layer class {name!r} in the model")
            classes.add(cls)
        if classes:
            policies.append(functools.partial(transformer_auto_wrap_policy, transformer_layer_cls=classes))
    if not policies:
        return None
    if len(policies) == 1:
        return policies[0]
    return functools.partial(_or_policy, policies=policies)


def fsdp_version(model: nn.Module) -> int:
    """0 for a plain module, 1 for an FSDP1 ``FullyShardedDataParallel``, 2 for an FSDP2 ``fully_shard`` module."""
    if isinstance(model, FSDP):
        return 1
    if isinstance(model, FSDPModule):
        return 2
    return 0


def get_fsdp_state_ctx(model: nn.Module, state_type, state_cfg, optim_cfg):
    """FSDP1 ``state_dict_type`` context; FSDP2 and plain modules need none (their state dicts are DTensors)."""
    if fsdp_version(model) == 1:
        return FSDP.state_dict_type(model, state_type, state_cfg, optim_cfg)
    return contextlib.nullcontext()


# ------------------------------------------------------------------------------------------------------------
# FSDP2
# ------------------------------------------------------------------------------------------------------------
def apply_fsdp2(model: nn.Module, fsdp_kwargs: dict, config) -> None:
    """``fully_shard`` every decoder layer (and untied embeddings), then the root. config: an ``fsdp_config``."""
    wrap_policy = config.get("wrap_policy", None) if config is not None else None
    names = _layer_class_names(model, wrap_policy)
    if not names:
        raise ValueError(
            "fsdp_config.wrap_policy.transformer_layer_cls_to_wrap is empty and the model has no _no_split_modules; "
            "name the decoder layer class to shard"
        )
    tied = getattr(getattr(model, "config", None), "tie_word_embeddings", False)
    # Sharding a tied embedding on its own would split the weight it shares with lm_head from its twin.
    targets = [m for m in model.modules() if type(m).__name__ in names or (isinstance(m, nn.Embedding) and not tied)]
    for m in targets:
        fully_shard(m, **fsdp_kwargs)
    fully_shard(model, **fsdp_kwargs)


def fsdp2_load_full_state_dict(model: nn.Module, full_state: dict, device_mesh=None, cpu_offload=None) -> None:
    """Load rank 0's full state dict into an FSDP2 module on every rank (others may hold meta parameters)."""
    device = _current_device()
    if _rank() == 0:
        model.to(device)
    else:
        model.to_empty(device=device)
    options = StateDictOptions(full_state_dict=True, cpu_offload=cpu_offload is not None, broadcast_from_rank0=True)
    set_model_state_dict(model, full_state, options=options)
    # Non-persistent buffers (rotary inv_freq) are not in the state dict; to_empty left them uninitialised.
    for buf in model.buffers():
        dist.broadcast(buf.data, src=0)
    if cpu_offload is not None:
        model.to("cpu")
        for buf in model.buffers():
            buf.data = buf.data.to(device)


def fsdp2_clip_grad_norm_(
    parameters: Iterable[torch.Tensor] | torch.Tensor,
    max_norm: float,
    norm_type: float = 2.0,
    error_if_nonfinite: bool = False,
    foreach: bool | None = None,
) -> torch.Tensor:
    """Clip the global gradient norm of (DTensor) parameters; returns the total norm before clipping (a scalar)."""
    params = [parameters] if isinstance(parameters, torch.Tensor) else list(parameters)
    grads = [p.grad for p in params if p.grad is not None]
    if not grads:
        return torch.tensor(0.0)
    total_norm = torch.nn.utils.get_total_norm(grads, norm_type, error_if_nonfinite, foreach)
    if isinstance(total_norm, DTensor):
        total_norm = total_norm.full_tensor()
    # A python scalar multiplies DTensor and plain grads alike; non-finite norms are handled by the caller.
    coef = min(float(max_norm) / (total_norm.item() + 1e-6), 1.0)
    if coef < 1.0:
        for g in grads:
            g.mul_(coef)
    return total_norm


def clip_grad_norm_(module: nn.Module, max_norm: float) -> torch.Tensor:
    """Clip the gradients of a plain, FSDP1 or FSDP2 module to ``max_norm``; returns the pre-clip global norm."""
    version = fsdp_version(module)
    if version == 1:
        return module.clip_grad_norm_(max_norm=max_norm)
    if version == 2:
        return fsdp2_clip_grad_norm_(module.parameters(), max_norm=max_norm)
    return torch.nn.utils.clip_grad_norm_(module.parameters(), max_norm=max_norm)


def _fsdp2_param_groups(module: FSDPModule) -> list:
    """The FSDP2 parameter groups of one module: torch >= 2.12 keeps a list, earlier releases one group or None."""
    state = module._get_fsdp_state()
    groups = getattr(state, "_fsdp_param_groups", None)
    if groups is not None:
        return list(groups)
    group = getattr(state, "_fsdp_param_group", None)
    return [] if group is None else [group]


@contextlib.contextmanager
def fsdp2_full_params(model: nn.Module):
    """Inside, every FSDP2 sub-module holds its full parameters and forwards run without collectives.

    Generation needs this: ranks stop at different steps (all rows hit EOS), and per-layer all-gathers would
    then wait on each other forever. Entering and leaving are collectives (one all-gather per module).
    A no-op for modules that are not FSDP2.
    """
    modules = [m for m in model.modules() if isinstance(m, FSDPModule)]
    if isinstance(model, FSDPModule):
        # Make the root the root before anything runs: a PEFT model's generate() enters the wrapped model below it,
        # and the first forward would otherwise initialise the inner modules as roots of their own, after which
        # the next forward through the real root fails ("FSDP state has already been lazily initialized").
        model._get_fsdp_state()._lazy_init()
    # FSDP2 has no getter for reshard_after_forward; remember the per-group setting to restore it exactly.
    saved = [[g.post_forward_mesh_info for g in _fsdp2_param_groups(m)] for m in modules]
    for m in modules:
        m.set_reshard_after_forward(False, recurse=False)
        m.unshard()
    try:
        yield
    finally:
        for m, infos in zip(modules, saved):
            m.reshard()
            for group, info in zip(_fsdp2_param_groups(m), infos):
                group.post_forward_mesh_info = info


class FSDP2Accumulation:
    """Gradient accumulation over the micro batches of one mini batch with one all-gather and one reduce-scatter.

    FSDP2 by default all-gathers each layer's parameters in every micro batch's forward and again in its backward,
    and reduce-scatters the gradients after every backward. Between ranks on one CPU host (gloo over loopback
    TCP) these collectives are slow: a 100 MB all-gather between two processes took 0.5 s on a loaded 2-core box,
    against about 6 s for the whole update of a 25M model. Here the full parameters stay from the first forward to
    the last backward, the gradients accumulate unreduced, and the last backward reduce-scatters them and reshards.
    The cost is memory: full parameters and gradients per rank for the span of a mini batch.

    Call :meth:`micro_batch` before each micro batch's forward (``last`` for the mini batch's last one) and
    :meth:`finish` after the last backward (or to abandon the mini batch). A no-op for a model without FSDP2.
    """

    def __init__(self, model: nn.Module):
        self.modules = [m for m in model.modules() if isinstance(m, FSDPModule)]
        self._saved: list | None = None

    @property
    def active(self) -> bool:
        return self._saved is not None

    def micro_batch(self, last: bool) -> None:
        if self._saved is None:
            self._saved = [[g.post_forward_mesh_info for g in _fsdp2_param_groups(m)] for m in self.modules]
            for m in self.modules:
                m.set_reshard_after_forward(False, recurse=False)
        for m in self.modules:
            m.set_requires_gradient_sync(last, recurse=False)
            m.set_reshard_after_backward(last, recurse=False)

    def finish(self) -> None:
        if self._saved is None:
            return
        for m, infos in zip(self.modules, self._saved, strict=True):
            m.set_requires_gradient_sync(True, recurse=False)
            m.set_reshard_after_backward(True, recurse=False)
            for group, info in zip(_fsdp2_param_groups(m), infos, strict=True):
                group.post_forward_mesh_info = info
            m.reshard()
        self._saved = None


def get_fsdp_full_state_dict(model: nn.Module, offload_to_cpu: bool = True, rank0_only: bool = True) -> dict:
    """Gather the full (unsharded) state dict; a collective: every rank must call it.

    With ``rank0_only`` the other ranks get ``{}``. Works for FSDP1, FSDP2 and plain modules.
    """
    if fsdp_version(model) == 1:
        cfg = FullStateDictConfig(offload_to_cpu=offload_to_cpu, rank0_only=rank0_only)
        with FSDP.state_dict_type(model, StateDictType.FULL_STATE_DICT, cfg):
            return model.state_dict()
    keep = not rank0_only or _rank() == 0
    out = {}
    for name, tensor in model.state_dict().items():
        full = tensor.full_tensor() if isinstance(tensor, DTensor) else tensor.detach()
        if keep:
            out[name] = full.cpu() if offload_to_cpu else full
    return out


# ------------------------------------------------------------------------------------------------------------
# offload (no-ops on a CPU-only machine: everything already lives in host memory)
# ------------------------------------------------------------------------------------------------------------
def _move_fsdp_model(model: nn.Module, device: torch.device) -> None:
    if fsdp_version(model) == 1:
        assert model._is_root, "offload/load of an FSDP1 model must be called on the root module"
        for handle in model._all_handles:
            if handle._offload_params:
                continue
            flat_param = handle.flat_param
            handle.flat_param_to(device, non_blocking=True)
            # FSDP1 keeps a reference to the local shard; point it at the moved storage.
            flat_param._local_shard = flat_param.data
    else:
        model.to(device)


@torch.no_grad()
def offload_fsdp_model_to_cpu(model: nn.Module, empty_cache: bool = True) -> None:
    """Move an FSDP model's parameter shards to host memory (no-op without an accelerator)."""
    if not is_accelerator_available():
        return
    _move_fsdp_model(model, torch.device("cpu"))
    if empty_cache:
        get_torch_device().empty_cache()


@torch.no_grad()
def load_fsdp_model_to_gpu(model: nn.Module) -> None:
    """Move an FSDP model's parameter shards back to the accelerator (no-op without one)."""
    if not is_accelerator_available():
        return
    _move_fsdp_model(model, _current_device())


def _move_optimizer_state(optimizer: torch.optim.Optimizer, device) -> None:
    for group in optimizer.param_groups:
        for param in group["params"]:
            state = optimizer.state.get(param, {})
            for key, value in state.items():
                if isinstance(value, torch.Tensor):
                    state[key] = value.to(device, non_blocking=True)


@torch.no_grad()
def offload_fsdp_optimizer(optimizer: torch.optim.Optimizer) -> None:
    """Move optimizer state (Adam moments) to host memory (no-op without an accelerator)."""
    if not is_accelerator_available() or not optimizer.state:
        return
    _move_optimizer_state(optimizer, "cpu")


@torch.no_grad()
def load_fsdp_optimizer(optimizer: torch.optim.Optimizer, device_id) -> None:
    """Move optimizer state back to ``device_id`` (no-op without an accelerator)."""
    if not is_accelerator_available() or not optimizer.state:
        return
    device = torch.device(get_device_name(), device_id) if isinstance(device_id, int) else device_id
    _move_optimizer_state(optimizer, device)


# ------------------------------------------------------------------------------------------------------------
# one entry point for the workers
# ------------------------------------------------------------------------------------------------------------
def _mixed_precision_dtypes(
    mixed_precision_config, stored_dtype: torch.dtype = torch.float32
) -> tuple[torch.dtype, torch.dtype, torch.dtype]:
    cfg = mixed_precision_config or {}
    # bf16 compute on a CPU without bf16 units is emulated and slow, so on CPU the model computes in the dtype it is
    # stored in (fp32 unless fsdp_config.model_dtype says otherwise) unless configured.
    default_param = "bf16" if is_accelerator_available() else stored_dtype
    return (
        _to_dtype(cfg.get("param_dtype", default_param), "mixed_precision.param_dtype"),
        _to_dtype(cfg.get("reduce_dtype", "fp32"), "mixed_precision.reduce_dtype"),
        _to_dtype(cfg.get("buffer_dtype", "fp32"), "mixed_precision.buffer_dtype"),
    )


def _mixed_precision_policy(param_dtype, reduce_dtype, stored: torch.dtype) -> MixedPrecisionPolicy:
    """FSDP2's policy. Computing in the stored dtype needs none, and none also leaves forward inputs uncast, so a
    caller may run the module with weights of another dtype (the HF rollout's bf16 decode on CPU)."""
    if param_dtype == stored:
        param_dtype = None
        # FSDP2 reduces in the param dtype by default, which is then the stored one
        reduce_dtype = None if reduce_dtype == stored else reduce_dtype
    return MixedPrecisionPolicy(param_dtype=param_dtype, reduce_dtype=reduce_dtype, cast_forward_inputs=True)


def resolve_fsdp_version(strategy: str) -> int:
    """1 or 2: ``fsdp2`` -> 2; ``fsdp`` -> 1 on an accelerator, 2 on CPU (FSDP1 needs an accelerator)."""
    if strategy == "fsdp2":
        return 2
    if strategy == "fsdp":
        return 1 if is_accelerator_available() else 2
    raise ValueError(f"strategy={strategy!r} is not an FSDP strategy; expected 'fsdp' or 'fsdp2'")


def wrap_model_for_training(
    module: nn.Module,
    strategy: str,
    device_mesh,
    fsdp_config=None,
    mixed_precision_config=None,
    cpu_offload: bool | None = None,
    is_lora: bool = False,
    disable_wrap_policy: bool = False,
) -> nn.Module:
    """Shard ``module`` over ``device_mesh`` with FSDP1 or FSDP2 (see :func:`resolve_fsdp_version`).

    ``fsdp_config`` is an ``fsdp_config`` section (``wrap_policy``, ``reshard_after_forward``, ``forward_prefetch``,
    ``offload_policy``); ``mixed_precision_config`` has ``param_dtype``/``reduce_dtype``/``buffer_dtype`` (default
    bf16/fp32/fp32 on accelerators; on CPU the model computes in the dtype it is stored in). ``cpu_offload``: None
    -> ``fsdp_config.offload_policy`` (FSDP2) / off (FSDP1); the reference policy passes True. Parameter offload is
    ignored on CPU-only machines.
    ``torch.distributed`` must be initialised; rank 0's weights are broadcast to the other ranks.
    Returns the FSDP1 wrapper or the (in place) ``fully_shard``-ed module.
    """
    fsdp_config = {} if fsdp_config is None else fsdp_config
    stored = next((p.dtype for p in module.parameters() if p.is_floating_point()), torch.float32)
    param_dtype, reduce_dtype, buffer_dtype = _mixed_precision_dtypes(mixed_precision_config, stored)
    version = resolve_fsdp_version(strategy)
    if version == 1:
        wrap_cfg = {"disable": True} if disable_wrap_policy else fsdp_config.get("wrap_policy", None)
        return FSDP(
            module,
            cpu_offload=CPUOffload(offload_params=True) if cpu_offload else None,
            param_init_fn=init_fn,
            use_orig_params=False,
            auto_wrap_policy=get_fsdp_wrap_policy(module, config=wrap_cfg, is_lora=is_lora),
            device_id=get_device_id(),
            sharding_strategy=get_sharding_strategy(device_mesh),
            mixed_precision=MixedPrecision(param_dtype, reduce_dtype=reduce_dtype, buffer_dtype=buffer_dtype),
            sync_module_states=True,
            device_mesh=device_mesh,
            forward_prefetch=fsdp_config.get("forward_prefetch", False),
        )
    if cpu_offload is None:
        cpu_offload = bool(fsdp_config.get("offload_policy", False))
    offload_policy = CPUOffloadPolicy(pin_memory=True) if cpu_offload and is_accelerator_available() else None
    fsdp_kwargs = {
        "mesh": device_mesh,
        "mp_policy": _mixed_precision_policy(param_dtype, reduce_dtype, stored),
        "offload_policy": offload_policy if offload_policy is not None else _no_offload(),
        "reshard_after_forward": fsdp_config.get("reshard_after_forward", True),
    }
    # Only rank 0's weights are real (the others may have been built on the meta device).
    full_state = module.state_dict() if _rank() == 0 else {}
    apply_fsdp2(module, fsdp_kwargs, fsdp_config)
    fsdp2_load_full_state_dict(module, full_state, device_mesh, offload_policy)
    return module


def _no_offload():
    from torch.distributed.fsdp import OffloadPolicy

    return OffloadPolicy()
