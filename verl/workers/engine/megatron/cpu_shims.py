"""Narrow covers for the CUDA-only spots megatron-core reaches on its forward and backward path, so the same model
code runs on CPU with gloo process groups. Each cover is a no-op where CUDA is available.

1. :func:`cpu_current_device`: megatron-core allocates buffers and moves the rotary ``inv_freq`` with
   ``device=torch.cuda.current_device()`` (rotary embedding, ``GlobalMemoryBuffer``, the tensor-parallel gathers in
   ``tensor_parallel.mappings`` and ``layers``), and with pipeline stages and tied embeddings it moves the last
   stage's copy of the embedding with ``weight.data.cuda()`` before syncing it; its distributed checkpointing
   (``dist_checkpointing.save``) waits with ``torch.cuda.synchronize()`` after copying tensors to host memory. Without
   a CUDA driver those calls raise; inside the context the first names the CPU, the second leaves the tensor where it
   is and the third returns at once (CPU copies are synchronous).
2. :class:`CPURNGStatesTracker`: the attention's dropout region forks the tensor-parallel RNG state
   (``get_cuda_rng_tracker().fork()``), and megatron-core's tracker keeps CUDA generator states. This one keeps CPU
   generator states under the same names and seeds (:func:`install_rng_tracker`).

3. :func:`reduce_scatter_via_all_reduce`: the distributed optimizer reduce-scatters the gradients over the data-
   parallel group, and gloo has no reduce-scatter. Over gloo it all-reduces the whole buffer and keeps this rank's
   slice (the same sums, more traffic); over other backends it is ``reduce_scatter_tensor`` itself. (Measured with
   torch 2.13: its gloo backend does run ``reduce_scatter_tensor`` and ``all_gather_into_tensor``, which megatron-core's
   sequence-parallel linears and embedding call directly; they need only cover 1 there.)

4. :func:`in_process_checkpoint_writes`: megatron-core's distributed-checkpoint writer forks one process per file
   from the trainer process to write its tensors. Forked from a process whose gloo and OpenMP threads are running,
   those children wrote their files but did not exit here (seen in every 2-process save tried), outliving the run;
   and the results come back through a queue of a spawned ``multiprocessing.Manager`` server, which outlives any
   worker that leaves without the interpreter's shutdown. Within the context the same per-file writer runs in this
   process instead and reports through an in-process queue (the same bytes; no overlap with compute, which the CPU
   engine does not use).

5. :func:`cover_missing_transformer_engine`: megatron-core 0.16.1's MoE router linear (``moe_utils.
   RouterGatingLinearFunction``) tests ``te_general_gemm is not None``, a name its module binds only when
   TransformerEngine imports; without TE (any CPU, a GPU without it) the test raises NameError. Bound to None, the
   router runs its torch matmul branch.

Megatron's own pipeline schedules create a tensor with the literal ``device="cuda"``; the engine drives its pipeline
stages itself instead (:mod:`verl.workers.engine.megatron.pipeline`), so no cover is needed there.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator

import torch
import torch.distributed as dist

__all__ = [
    "CPURNGStatesTracker",
    "cover_missing_transformer_engine",
    "cpu_current_device",
    "in_process_checkpoint_writes",
    "install_rng_tracker",
    "reduce_scatter_via_all_reduce",
    "rng_seeds",
]


@contextlib.contextmanager
def cpu_current_device() -> Iterator[None]:
    """Within the block, when CUDA is not available (where all three would raise), ``torch.cuda.current_device()``
    returns ``"cpu"``, ``Tensor.cuda()`` returns the tensor itself and ``torch.cuda.synchronize()`` returns at once:
    megatron-core's allocations on the current device land on the CPU. Unchanged with CUDA."""
    if torch.cuda.is_available():
        yield
        return
    current_device, tensor_cuda, synchronize = torch.cuda.current_device, torch.Tensor.cuda, torch.cuda.synchronize
    torch.cuda.current_device = lambda: "cpu"
    torch.Tensor.cuda = lambda self, *args, **kwargs: self
    torch.cuda.synchronize = lambda device=None: None
    try:
        yield
    finally:
        torch.cuda.current_device, torch.Tensor.cuda, torch.cuda.synchronize = current_device, tensor_cuda, synchronize


class CPURNGStatesTracker:
    """megatron-core's RNG-states tracker interface (``add``, ``fork``, ``get_states``, ``set_states``, ``reset``,
    ``is_initialized``) over the CPU generator: ``fork(name)`` runs its block with the named state swapped in and keeps
    the advanced state for the next fork, restoring the default stream afterwards."""

    def __init__(self):
        self.reset()

    def is_initialized(self) -> bool:
        return self._is_initialized

    def reset(self) -> None:
        self._is_initialized = False
        self.states_: dict[str, torch.Tensor] = {}
        self.seeds_: set[int] = set()

    def get_states(self) -> dict[str, torch.Tensor]:
        return dict(self.states_)

    def set_states(self, states: dict[str, torch.Tensor]) -> None:
        self._is_initialized = True
        self.states_ = states

    def add(self, name: str, seed: int) -> None:
        if seed in self.seeds_:
            raise ValueError(f"RNG seed {seed} is already tracked")
        if name in self.states_:
            raise ValueError(f"RNG state {name!r} is already tracked")
        self._is_initialized = True
        self.seeds_.add(seed)
        self.states_[name] = torch.Generator().manual_seed(seed).get_state()

    @contextlib.contextmanager
    def fork(self, name: str = "model-parallel-rng") -> Iterator[None]:
        if name not in self.states_:
            raise KeyError(f"RNG state {name!r} is not tracked; tracked: {sorted(self.states_)}")
        default_state = torch.get_rng_state()
        torch.set_rng_state(self.states_[name])
        try:
            yield
        finally:
            self.states_[name] = torch.get_rng_state()
            torch.set_rng_state(default_state)


def rng_seeds(seed: int, tp_rank: int, ep_rank: int = 0, etp_rank: int = 0) -> dict[str, int]:
    """The named seeds megatron-core's ``model_parallel_cuda_manual_seed`` tracks: the data-parallel stream gets
    ``seed``; the tensor-parallel one differs per tensor-parallel rank; the expert one per expert rank."""
    return {
        "data-parallel-rng": seed,
        "model-parallel-rng": seed + 2718 + tp_rank,
        "expert-parallel-rng": seed + 1024 + 100 * ep_rank + etp_rank,
    }


def install_rng_tracker(seed: int) -> None:
    """Seed this rank's RNG streams as megatron-core does (after ``initialize_model_parallel``): on CUDA with its own
    ``model_parallel_cuda_manual_seed``; on CPU a :class:`CPURNGStatesTracker` becomes the tracker every
    ``get_cuda_rng_tracker()`` returns (modules import that getter by name, and it reads one module global)."""
    from megatron.core import parallel_state, tensor_parallel
    from megatron.core.tensor_parallel import random as mp_random

    if torch.cuda.is_available():
        tensor_parallel.model_parallel_cuda_manual_seed(seed)
        return
    tracker = CPURNGStatesTracker()
    seeds = rng_seeds(
        seed,
        parallel_state.get_tensor_model_parallel_rank(),
        parallel_state.get_expert_model_parallel_rank(),
        parallel_state.get_expert_tensor_parallel_rank(),
    )
    for name, value in seeds.items():
        tracker.add(name, value)
    torch.manual_seed(seed)
    mp_random._CUDA_RNG_STATE_TRACKER = tracker
    mp_random._CUDA_RNG_STATE_TRACKER_INITIALIZED = True


def reduce_scatter_via_all_reduce(output: torch.Tensor, input: torch.Tensor, group=None) -> None:
    """``output`` ``(n,)`` := this rank's ``n``-element slice (rank order) of the sum over ``group`` of ``input``
    ``(n * group size,)``, as ``dist.reduce_scatter_tensor``; over gloo, which lacks it, by an all-reduce of a copy of
    ``input`` (the same sums)."""
    world = dist.get_world_size(group)
    if input.numel() != output.numel() * world:
        raise ValueError(f"input has {input.numel()} elements; expected {output.numel()} x {world} ranks")
    if dist.get_backend(group) != "gloo":
        dist.reduce_scatter_tensor(output, input, group=group)
        return
    summed = input.clone()
    dist.all_reduce(summed, group=group)
    output.copy_(summed.view(world, -1)[dist.get_rank(group)])


def _write_buckets_in_process(transform_list, use_msc: bool, rank: int, write_buckets, global_results_queue) -> None:
    """``FileSystemWriterAsync.write_preloaded_data_multiproc`` without its worker processes: each file's writer in
    turn, the results (or the first error) reported the same way."""
    import queue

    from megatron.core.dist_checkpointing.strategies.filesystem_async import FileSystemWriterAsync

    results: dict | Exception = {}
    for index, bucket in enumerate(write_buckets):
        local_results, count = queue.Queue(), queue.Queue()
        count.put(index)
        kwargs = {"use_msc": use_msc} if use_msc else {}
        FileSystemWriterAsync.write_preloaded_data(
            transform_list, index, bucket, local_results, count, use_fsync=True, **kwargs
        )
        _, output = local_results.get()
        if isinstance(output, Exception):
            results = output
            break
        results[index] = output
    global_results_queue.put(results)


@contextlib.contextmanager
def in_process_checkpoint_writes() -> Iterator[None]:
    """Within the block, when CUDA is not available, megatron-core's distributed-checkpoint writer writes its files
    in this process instead of forked ones (see the module's note 4). Unchanged with CUDA."""
    if torch.cuda.is_available():
        yield
        return
    import queue

    from megatron.core.dist_checkpointing.strategies import filesystem_async
    from megatron.core.dist_checkpointing.strategies.filesystem_async import FileSystemWriterAsync

    if filesystem_async._results_queue is None:  # read in this process only: no Manager server process needed
        filesystem_async._results_queue = queue.Queue()
    original = FileSystemWriterAsync.__dict__["write_preloaded_data_multiproc"]
    FileSystemWriterAsync.write_preloaded_data_multiproc = staticmethod(_write_buckets_in_process)
    try:
        yield
    finally:
        FileSystemWriterAsync.write_preloaded_data_multiproc = original


def cover_missing_transformer_engine() -> None:
    """Bind ``megatron.core.transformer.moe.moe_utils.te_general_gemm`` to None where TransformerEngine did not
    import (it is unbound then, and the MoE router's linear raises NameError); with TE, nothing changes."""
    from megatron.core.transformer.moe import moe_utils

    if not hasattr(moe_utils, "te_general_gemm"):
        moe_utils.te_general_gemm = None
