"""Ulysses sequence parallelism: each rank of a sequence-parallel (SP) group holds a slice of the packed sequence.

Attention needs the whole sequence, so around it an all-to-all turns "every head, 1/sp of the tokens" into
"1/sp of the heads, every token" and back (:func:`gather_seq_scatter_heads`, :func:`gather_heads_scatter_seq`).
Everything here is autograd-aware and runs on gloo (CPU) as well as NCCL/HCCL; with no SP group set, or a group of
one rank, the functions are identities.
"""

from __future__ import annotations

import torch
import torch.distributed as dist
from torch.distributed import ProcessGroup

__all__ = [
    "Gather",
    "SeqAllToAll",
    "all_gather_tensor",
    "all_to_all_tensor",
    "gather_heads_scatter_seq",
    "gather_outpus_and_unpad",
    "gather_seq_scatter_heads",
    "get_ulysses_sequence_parallel_group",
    "get_ulysses_sequence_parallel_rank",
    "get_ulysses_sequence_parallel_world_size",
    "set_ulysses_sequence_parallel_group",
    "slice_input_tensor",
    "ulysses_pad",
    "ulysses_pad_and_slice_inputs",
    "validate_ulysses_config",
]

_ULYSSES_SEQUENCE_PARALLEL_GROUP: ProcessGroup | None = None


def set_ulysses_sequence_parallel_group(group: ProcessGroup | None) -> None:
    """Set (or clear, with None) the process group that sequence-parallel collectives use by default."""
    global _ULYSSES_SEQUENCE_PARALLEL_GROUP
    _ULYSSES_SEQUENCE_PARALLEL_GROUP = group


def get_ulysses_sequence_parallel_group() -> ProcessGroup | None:
    """The current SP process group (None when sequence parallelism is off)."""
    return _ULYSSES_SEQUENCE_PARALLEL_GROUP


def get_ulysses_sequence_parallel_world_size(group: ProcessGroup | None = None) -> int:
    """Ranks in the SP group (1 when there is none)."""
    group = get_ulysses_sequence_parallel_group() if group is None else group
    return dist.get_world_size(group) if group is not None else 1


def get_ulysses_sequence_parallel_rank(group: ProcessGroup | None = None) -> int:
    """This process's rank inside the SP group (0 when there is none)."""
    group = get_ulysses_sequence_parallel_group() if group is None else group
    return dist.get_rank(group) if group is not None else 0


# ------------------------------------------------------------------------------------------------------------
# raw collectives
# ------------------------------------------------------------------------------------------------------------
def all_to_all_tensor(
    local_input: torch.Tensor, scatter_dim: int, gather_dim: int, group: ProcessGroup | None = None, async_op=False
):
    """Split ``local_input`` into ``sp`` chunks along ``scatter_dim``, send chunk i to rank i, concatenate what
    arrives along ``gather_dim``. ``scatter_dim`` must be divisible by the group size.

    Returns the tensor, or with ``async_op`` a function that waits and returns it.
    """
    group = get_ulysses_sequence_parallel_group() if group is None else group
    world = dist.get_world_size(group)
    if local_input.size(scatter_dim) % world != 0:
        raise ValueError(
            f"all_to_all_tensor: dim {scatter_dim} has size {local_input.size(scatter_dim)}, "
            f"not divisible by the group size {world}"
        )
    inputs = [t.contiguous() for t in torch.tensor_split(local_input, world, dim=scatter_dim)]
    outputs = [torch.empty_like(inputs[0]) for _ in range(world)]
    # dist.all_to_all with tensor lists works on gloo (checked with torch 2.13) as well as NCCL.
    work = dist.all_to_all(outputs, inputs, group=group, async_op=async_op)
    if async_op:

        def wait() -> torch.Tensor:
            work.wait()
            return torch.cat(outputs, dim=gather_dim).contiguous()

        return wait
    return torch.cat(outputs, dim=gather_dim).contiguous()


def all_gather_tensor(
    local_tensor: torch.Tensor, gather_dim: int, group: ProcessGroup | None = None, async_op: bool = False
):
    """Concatenate every rank's ``local_tensor`` (equal shapes) along ``gather_dim`` (not autograd-aware)."""
    group = get_ulysses_sequence_parallel_group() if group is None else group
    world = dist.get_world_size(group)
    local_tensor = local_tensor.contiguous()
    chunks = [torch.empty_like(local_tensor) for _ in range(world)]
    work = dist.all_gather(chunks, local_tensor, group=group, async_op=async_op)
    if async_op:

        def wait() -> torch.Tensor:
            work.wait()
            return torch.cat(chunks, dim=gather_dim)

        return wait
    return torch.cat(chunks, dim=gather_dim)


class SeqAllToAll(torch.autograd.Function):
    """Autograd all-to-all: forward scatters ``scatter_dim`` and gathers ``gather_dim``; backward the reverse."""

    @staticmethod
    def forward(ctx, group, local_input, scatter_dim: int, gather_dim: int, async_op: bool = False):
        ctx.group, ctx.scatter_dim, ctx.gather_dim = group, scatter_dim, gather_dim
        return all_to_all_tensor(local_input, scatter_dim, gather_dim, group)

    @staticmethod
    def backward(ctx, grad_output):
        grad = all_to_all_tensor(grad_output.contiguous(), ctx.gather_dim, ctx.scatter_dim, ctx.group)
        return None, grad, None, None, None


class Gather(torch.autograd.Function):
    """Autograd all-gather along ``gather_dim``.

    The backward keeps this rank's slice of the gradient and, with ``grad_scaler``, multiplies it by the SP size:
    every SP rank computes the same loss from the gathered tensor, and the data-parallel gradient reduction then
    averages over all ``dp * sp`` ranks, which would otherwise shrink the gradient by ``sp``.
    """

    @staticmethod
    def forward(ctx, group, local_tensor, gather_dim: int, grad_scaler: bool = True, async_op: bool = False):
        world = dist.get_world_size(group)
        ctx.group, ctx.gather_dim, ctx.grad_scaler = group, gather_dim, grad_scaler
        ctx.rank, ctx.world = dist.get_rank(group), world
        ctx.local_size = local_tensor.size(gather_dim)
        return all_gather_tensor(local_tensor, gather_dim, group)

    @staticmethod
    def backward(ctx, grad_output):
        if ctx.grad_scaler:
            grad_output = grad_output * ctx.world
        grad = grad_output.narrow(ctx.gather_dim, ctx.rank * ctx.local_size, ctx.local_size).contiguous()
        return None, grad, None, None, None


# ------------------------------------------------------------------------------------------------------------
# attention all-to-all
# ------------------------------------------------------------------------------------------------------------
def _pad_dim(x: torch.Tensor, dim: int, padding: int) -> torch.Tensor:
    if padding <= 0:
        return x
    shape = list(x.shape)
    shape[dim] = padding
    return torch.cat([x, x.new_zeros(shape)], dim=dim)


def _unpad_dim(x: torch.Tensor, dim: int, padding: int) -> torch.Tensor:
    if padding <= 0:
        return x
    return x.narrow(dim, 0, x.size(dim) - padding)


def gather_seq_scatter_heads(
    x: torch.Tensor, seq_dim: int, head_dim: int, unpadded_dim_size: int = 0, group: ProcessGroup | None = None
) -> torch.Tensor:
    """``(.., seq/sp, .., heads, ..)`` -> ``(.., seq, .., heads/sp, ..)`` before attention.

    ``unpadded_dim_size``: the true full sequence length when the gathered one was padded to a multiple of sp
    (the pad is cut off). The head dimension must be divisible by sp.
    """
    group = get_ulysses_sequence_parallel_group() if group is None else group
    if group is None or dist.get_world_size(group) == 1:
        return x
    x = SeqAllToAll.apply(group, x, head_dim, seq_dim)
    if unpadded_dim_size and unpadded_dim_size % dist.get_world_size(group) != 0:
        x = _unpad_dim(x, seq_dim, x.size(seq_dim) - unpadded_dim_size)
    return x


def gather_heads_scatter_seq(
    x: torch.Tensor, head_dim: int, seq_dim: int, group: ProcessGroup | None = None
) -> torch.Tensor:
    """``(.., seq, .., heads/sp, ..)`` -> ``(.., seq/sp, .., heads, ..)`` after attention (seq padded to a multiple
    of sp first if needed)."""
    group = get_ulysses_sequence_parallel_group() if group is None else group
    if group is None:
        return x
    world = dist.get_world_size(group)
    if world == 1:
        return x
    x = _pad_dim(x, seq_dim, (world - x.size(seq_dim) % world) % world)
    return SeqAllToAll.apply(group, x, seq_dim, head_dim)


def slice_input_tensor(x: torch.Tensor, dim: int, padding: bool = True, group: ProcessGroup | None = None):
    """This SP rank's contiguous chunk of ``x`` along ``dim`` (zero-padded to a multiple of sp with ``padding``)."""
    group = get_ulysses_sequence_parallel_group() if group is None else group
    world = get_ulysses_sequence_parallel_world_size(group)
    if world == 1:
        return x
    rank = get_ulysses_sequence_parallel_rank(group)
    if padding:
        x = _pad_dim(x, dim, (world - x.size(dim) % world) % world)
    elif x.size(dim) % world != 0:
        raise ValueError(f"slice_input_tensor: dim {dim} has size {x.size(dim)}, not divisible by sp={world}")
    part = x.size(dim) // world
    return x.narrow(dim, rank * part, part)


def gather_outpus_and_unpad(
    x: torch.Tensor,
    gather_dim: int,
    unpad_dim: int | None = None,
    padding_size: int = 0,
    grad_scaler: bool = True,
    group: ProcessGroup | None = None,
) -> torch.Tensor:
    """All-gather the SP slices of ``x`` along ``gather_dim`` (autograd-aware, see :class:`Gather`) and cut
    ``padding_size`` entries off the end of ``unpad_dim``. ``x`` unchanged when there is no SP group.

    e.g. per-token losses ``(nnz_padded/sp,)`` -> ``(nnz,)`` with ``gather_dim=0, unpad_dim=0``.
    """
    group = get_ulysses_sequence_parallel_group() if group is None else group
    if group is None:
        return x
    x = Gather.apply(group, x, gather_dim, grad_scaler)
    if unpad_dim is not None and padding_size > 0:
        x = _unpad_dim(x, unpad_dim, padding_size)
    return x


# ------------------------------------------------------------------------------------------------------------
# input preparation
# ------------------------------------------------------------------------------------------------------------
def ulysses_pad(input_ids_rmpad: torch.Tensor, position_ids_rmpad: torch.Tensor | None = None, sp_size: int = 1):
    """Right-pad a packed sequence to a multiple of ``sp_size``.

    input_ids_rmpad ``(1, nnz)``; position_ids_rmpad ``(1, nnz)`` or ``(3, 1, nnz)`` (mrope). The pad gets token 0
    and positions ``0..pad-1`` (a sequence of its own, so attention keeps it apart). Returns
    ``(input_ids, position_ids, pad_size)``.
    """
    if position_ids_rmpad is not None and position_ids_rmpad.size(-1) != input_ids_rmpad.size(-1):
        raise ValueError(
            f"position_ids_rmpad has {position_ids_rmpad.size(-1)} tokens, input_ids_rmpad {input_ids_rmpad.size(-1)}"
        )
    pad_size = (sp_size - input_ids_rmpad.size(-1) % sp_size) % sp_size
    if pad_size == 0:
        return input_ids_rmpad, position_ids_rmpad, 0
    input_ids_rmpad = torch.nn.functional.pad(input_ids_rmpad, (0, pad_size), value=0)
    if position_ids_rmpad is not None:
        extra = torch.arange(pad_size, device=position_ids_rmpad.device, dtype=position_ids_rmpad.dtype)
        extra = extra.expand(*position_ids_rmpad.shape[:-1], pad_size)
        position_ids_rmpad = torch.cat([position_ids_rmpad, extra], dim=-1)
    return input_ids_rmpad, position_ids_rmpad, pad_size


def ulysses_pad_and_slice_inputs(
    input_ids_rmpad: torch.Tensor, position_ids_rmpad: torch.Tensor | None = None, sp_size: int = 1
):
    """:func:`ulysses_pad`, then keep this SP rank's chunk of the token dimension (the last one).

    Returns ``(input_ids (1, nnz_padded/sp), position_ids (.., 1, nnz_padded/sp) or None, pad_size)``.
    """
    input_ids_rmpad, position_ids_rmpad, pad_size = ulysses_pad(input_ids_rmpad, position_ids_rmpad, sp_size)
    input_ids_rmpad = slice_input_tensor(input_ids_rmpad, dim=-1, padding=False)
    if position_ids_rmpad is not None:
        position_ids_rmpad = slice_input_tensor(position_ids_rmpad, dim=-1, padding=False)
    return input_ids_rmpad, position_ids_rmpad, pad_size


def validate_ulysses_config(num_heads: int, ulysses_sequence_size: int) -> None:
    """Each SP rank attends over ``num_heads / sp`` heads, so ``num_heads`` must divide evenly."""
    if ulysses_sequence_size > 1:
        assert num_heads % ulysses_sequence_size == 0, (
            f"num_attention_heads={num_heads} must be divisible by "
            f"ulysses_sequence_parallel_size={ulysses_sequence_size}"
        )
