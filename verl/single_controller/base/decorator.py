"""`@register`: declare once, on a worker method, how a worker-group call splits its input and gathers its output.

A call ``wg.method(x)`` on the driver runs ``dispatch_fn`` (one argument set per worker), the group's execute
function (all workers or rank 0), and ``collect_fn`` (one value back). The pairs live in
``DISPATCH_MODE_FN_REGISTRY`` keyed by :class:`Dispatch` members; users may add their own modes.
"""

from __future__ import annotations

import functools
import inspect
import sys
from typing import Any

from verl.protocol import DataProto, DataProtoFuture, _padding_size_key
from verl.utils.debug.profile import DistProfilerExtension
from verl.utils.distributed import adopt_worker_threads
from verl.utils.py_functional import DynamicEnum

# attribute name under which @register stores its settings on the wrapped method
MAGIC_ATTR = "attrs_3141562937"


class Dispatch(DynamicEnum):
    """How a call's arguments are spread over workers and its outputs gathered."""

    _registry = {}
    _next_value = 0


class Execute(DynamicEnum):
    """Which workers run a call: all of them or rank 0 only."""

    _registry = {}
    _next_value = 0


for _name in (
    "RANK_ZERO",
    "ONE_TO_ALL",
    "ALL_TO_ALL",
    "MEGATRON_COMPUTE",
    "MEGATRON_PP_AS_DP",
    "MEGATRON_PP_ONLY",
    "MEGATRON_COMPUTE_PROTO",
    "MEGATRON_PP_AS_DP_PROTO",
    "DP_COMPUTE",
    "DP_COMPUTE_PROTO",
    "DP_COMPUTE_PROTO_WITH_FUNC",
    "DP_COMPUTE_METRIC",
    "DIRECT_ROLLOUT_METHOD",
):
    Dispatch.register(_name)
for _name in ("ALL", "RANK_ZERO"):
    Execute.register(_name)


# ----------------------------------------------------------------------------------------------- splitting helpers
def _is_proto(value) -> bool:
    return isinstance(value, DataProto | DataProtoFuture)


def _split_args_kwargs_data_proto(chunks: int, *args, **kwargs):
    """Chunk every DataProto/DataProtoFuture argument into ``chunks`` pieces (one per worker)."""
    split_args = []
    for index, arg in enumerate(args):
        assert _is_proto(arg), f"positional argument {index} must be a DataProto or DataProtoFuture, got {type(arg)}"
        split_args.append(arg.chunk(chunks=chunks))
    split_kwargs = {}
    for key, val in kwargs.items():
        assert _is_proto(val), f"keyword argument '{key}' must be a DataProto or DataProtoFuture, got {type(val)}"
        split_kwargs[key] = val.chunk(chunks=chunks)
    return split_args, split_kwargs


def _split_args_kwargs_data_proto_with_auto_padding(chunks: int, *args, **kwargs):
    """Like :func:`_split_args_kwargs_data_proto`, padding DataProtos that ask for it to a multiple of ``chunks``.

    Positional and keyword arguments follow the same rule (verl 0.4.1 skipped keyword arguments). The number of
    padding rows is returned under ``_padding_size_key`` so the collected output can be trimmed.
    """
    padding_size = None

    def pad(name, value):
        nonlocal padding_size
        if isinstance(value, DataProto) and value.is_padding_enabled():
            size = (chunks - len(value) % chunks) % chunks
            if padding_size is not None:
                assert size == padding_size, (
                    f"auto-padding: argument {name} needs {size} padding rows, another argument needs {padding_size}; "
                    "all padded DataProto arguments must have the same length"
                )
            padding_size = size
            value.padding(size)
        return value

    args = tuple(pad(f"#{i}", arg) for i, arg in enumerate(args))
    kwargs = {key: pad(f"'{key}'", val) for key, val in kwargs.items()}
    split_args, split_kwargs = _split_args_kwargs_data_proto(chunks, *args, **kwargs)
    if padding_size is not None:
        split_kwargs[_padding_size_key] = padding_size
    return split_args, split_kwargs


# ------------------------------------------------------------------------------------ dispatch / collect functions
def dispatch_one_to_all(worker_group, *args, **kwargs):
    """Every worker receives the same arguments."""
    world_size = worker_group.world_size
    return tuple([arg] * world_size for arg in args), {k: [v] * world_size for k, v in kwargs.items()}


def dispatch_all_to_all(worker_group, *args, **kwargs):
    """Arguments pass through unchanged (a per-worker list is split by the execute function)."""
    return args, kwargs


def collect_all_to_all(worker_group, output):
    """The list of per-worker outputs."""
    return output


def dispatch_dp_compute(worker_group, *args, **kwargs):
    """Arguments are already split by the caller: each must be a list/tuple of length world_size."""
    world_size = worker_group.world_size
    for index, arg in enumerate(args):
        assert isinstance(arg, tuple | list) and len(arg) == world_size, (
            f"DP_COMPUTE: positional argument {index} must be a list of length {world_size} (one per worker)"
        )
    for key, val in kwargs.items():
        assert isinstance(val, tuple | list) and len(val) == world_size, (
            f"DP_COMPUTE: keyword argument '{key}' must be a list of length {world_size} (one per worker)"
        )
    return args, kwargs


def collect_dp_compute(worker_group, output):
    assert len(output) == worker_group.world_size, (
        f"DP_COMPUTE: expected {worker_group.world_size} outputs, got {len(output)}"
    )
    return output


def dispatch_dp_compute_data_proto(worker_group, *args, **kwargs):
    """Chunk DataProto arguments over the workers, auto-padding those that ask for it."""
    return _split_args_kwargs_data_proto_with_auto_padding(worker_group.world_size, *args, **kwargs)


def dispatch_dp_compute_data_proto_with_func(worker_group, *args, **kwargs):
    """First argument is a function replicated to all workers; the DataProto arguments are chunked."""
    assert len(args) > 0 and inspect.isfunction(args[0]), (
        "DP_COMPUTE_PROTO_WITH_FUNC: the first argument must be a Python function"
    )
    split_args, split_kwargs = _split_args_kwargs_data_proto(worker_group.world_size, *args[1:], **kwargs)
    return [[args[0]] * worker_group.world_size, *split_args], split_kwargs


def _object_ref_types() -> tuple[type, ...]:
    """``(ray.ObjectRef,)`` once Ray is imported, else ``()``: no ObjectRef exists before, and the in-process group
    and torchrun runs must not import Ray (it may not be installed)."""
    ray = sys.modules.get("ray")
    return (ray.ObjectRef,) if ray is not None else ()


def _concat_data_proto_or_future(output: list):
    first = output[0]
    for item in output:
        assert type(item) is type(first), f"outputs of one call must share a type, got {type(first)} and {type(item)}"
    if isinstance(first, DataProto):
        return DataProto.concat(output)
    if isinstance(first, _object_ref_types()):
        return DataProtoFuture.concat(output)
    raise NotImplementedError(f"cannot concatenate outputs of type {type(first)}")


def collect_dp_compute_data_proto(worker_group, output):
    """Concatenate per-worker DataProtos in rank order (or build a DataProtoFuture for non-blocking calls)."""
    for item in output:
        assert isinstance(item, (DataProto, *_object_ref_types())), (
            f"DP_COMPUTE_PROTO outputs must be DataProto (or ObjectRef), got {type(item).__name__}"
        )
    output = collect_dp_compute(worker_group, output)
    return _concat_data_proto_or_future(output)


# Megatron modes: workers form a (tp, pp, cp, dp) grid; data is split over dp (or pp*dp*cp) and only one rank
# per data shard reports back.
def dispatch_megatron_compute(worker_group, *args, **kwargs):
    """Each worker receives the element of every (dp-split) argument at its dp rank."""
    import ray

    dp_size = worker_group.dp_size
    put_args = []
    for index, arg in enumerate(args):
        assert isinstance(arg, tuple | list) and len(arg) == dp_size, (
            f"MEGATRON_COMPUTE: positional argument {index} must be a list of length dp_size={dp_size}"
        )
        put_args.append([ray.put(x) for x in arg])
    put_kwargs = {}
    for key, val in kwargs.items():
        assert isinstance(val, tuple | list) and len(val) == dp_size, (
            f"MEGATRON_COMPUTE: keyword argument '{key}' must be a list of length dp_size={dp_size}"
        )
        put_kwargs[key] = [ray.put(x) for x in val]
    ranks = [worker_group.get_megatron_rank_info(rank=r).dp_rank for r in range(worker_group.world_size)]
    return (
        tuple([arg[dp] for dp in ranks] for arg in put_args),
        {key: [val[dp] for dp in ranks] for key, val in put_kwargs.items()},
    )


def collect_megatron_compute(worker_group, output):
    """Keep the output of the last pp stage at tp_rank 0 and cp_rank 0 for every dp rank."""
    pp_size = worker_group.pp_size
    kept = []
    for rank, item in enumerate(output):
        info = worker_group.get_megatron_rank_info(rank=rank)
        if info.tp_rank == 0 and info.pp_rank == pp_size - 1 and info.cp_rank == 0:
            kept.append(item)
    return kept


def dispatch_megatron_compute_data_proto(worker_group, *args, **kwargs):
    split_args, split_kwargs = _split_args_kwargs_data_proto(worker_group.dp_size, *args, **kwargs)
    return dispatch_megatron_compute(worker_group, *split_args, **split_kwargs)


def collect_megatron_compute_data_proto(worker_group, output):
    return _concat_data_proto_or_future(collect_megatron_compute(worker_group, output))


def dispatch_megatron_pp_as_dp(worker_group, *args, **kwargs):
    """Treat pipeline stages as extra data shards: worker gets element ((cp*dp + dp_rank) * pp + pp_rank)."""
    shards = worker_group.pp_size * worker_group.dp_size * worker_group.cp_size
    dp_size, pp_size = worker_group.dp_size, worker_group.pp_size

    def shard_index(rank):
        info = worker_group.get_megatron_rank_info(rank=rank)
        return (info.cp_rank * dp_size + info.dp_rank) * pp_size + info.pp_rank

    indices = [shard_index(r) for r in range(worker_group.world_size)]
    out_args = []
    for index, arg in enumerate(args):
        assert isinstance(arg, list | tuple) and len(arg) == shards, (
            f"MEGATRON_PP_AS_DP: positional argument {index} must be a list of length pp*dp*cp={shards}"
        )
        out_args.append([arg[i] for i in indices])
    out_kwargs = {}
    for key, val in kwargs.items():
        assert isinstance(val, list | tuple) and len(val) == shards, (
            f"MEGATRON_PP_AS_DP: keyword argument '{key}' must be a list of length pp*dp*cp={shards}"
        )
        out_kwargs[key] = [val[i] for i in indices]
    return tuple(out_args), out_kwargs


def collect_megatron_pp_as_dp(worker_group, output):
    return [item for rank, item in enumerate(output) if worker_group.get_megatron_rank_info(rank=rank).tp_rank == 0]


def collect_megatron_pp_only(worker_group, output):
    kept = []
    for rank, item in enumerate(output):
        info = worker_group.get_megatron_rank_info(rank=rank)
        if info.tp_rank == 0 and info.dp_rank == 0:
            kept.append(item)
    return kept


def dispatch_megatron_pp_as_dp_data_proto(worker_group, *args, **kwargs):
    shards = worker_group.pp_size * worker_group.dp_size * worker_group.cp_size
    split_args, split_kwargs = _split_args_kwargs_data_proto(shards, *args, **kwargs)
    return dispatch_megatron_pp_as_dp(worker_group, *split_args, **split_kwargs)


def collect_megatron_pp_as_dp_data_proto(worker_group, output):
    return _concat_data_proto_or_future(collect_megatron_pp_as_dp(worker_group, output))


def dummy_direct_rollout_call(worker_group, *args, **kwargs):
    raise NotImplementedError("Direct rollout call is forbidden.")


def collect_dp_compute_metric(worker_group, output):
    """The list of per-worker outputs (metrics are not concatenated)."""
    return output


DISPATCH_MODE_FN_REGISTRY: dict[Dispatch, dict[str, Any]] = {
    Dispatch.ONE_TO_ALL: {"dispatch_fn": dispatch_one_to_all, "collect_fn": collect_all_to_all},
    Dispatch.ALL_TO_ALL: {"dispatch_fn": dispatch_all_to_all, "collect_fn": collect_all_to_all},
    Dispatch.MEGATRON_COMPUTE: {"dispatch_fn": dispatch_megatron_compute, "collect_fn": collect_megatron_compute},
    Dispatch.MEGATRON_PP_AS_DP: {"dispatch_fn": dispatch_megatron_pp_as_dp, "collect_fn": collect_megatron_pp_as_dp},
    Dispatch.MEGATRON_PP_ONLY: {"dispatch_fn": dispatch_one_to_all, "collect_fn": collect_megatron_pp_only},
    Dispatch.MEGATRON_COMPUTE_PROTO: {
        "dispatch_fn": dispatch_megatron_compute_data_proto,
        "collect_fn": collect_megatron_compute_data_proto,
    },
    Dispatch.MEGATRON_PP_AS_DP_PROTO: {
        "dispatch_fn": dispatch_megatron_pp_as_dp_data_proto,
        "collect_fn": collect_megatron_pp_as_dp_data_proto,
    },
    Dispatch.DP_COMPUTE: {"dispatch_fn": dispatch_dp_compute, "collect_fn": collect_dp_compute},
    Dispatch.DP_COMPUTE_PROTO: {
        "dispatch_fn": dispatch_dp_compute_data_proto,
        "collect_fn": collect_dp_compute_data_proto,
    },
    Dispatch.DP_COMPUTE_PROTO_WITH_FUNC: {
        "dispatch_fn": dispatch_dp_compute_data_proto_with_func,
        "collect_fn": collect_dp_compute_data_proto,
    },
    Dispatch.DP_COMPUTE_METRIC: {
        "dispatch_fn": dispatch_dp_compute_data_proto,
        "collect_fn": collect_dp_compute_metric,
    },
    Dispatch.DIRECT_ROLLOUT_METHOD: {
        "dispatch_fn": dummy_direct_rollout_call,
        "collect_fn": dummy_direct_rollout_call,
    },
}


def get_predefined_dispatch_fn(dispatch_mode: Dispatch) -> dict:
    """The ``{"dispatch_fn", "collect_fn"}`` dict registered for ``dispatch_mode``."""
    if dispatch_mode not in DISPATCH_MODE_FN_REGISTRY:
        raise KeyError(f"dispatch mode {dispatch_mode} has no registered dispatch/collect functions")
    return DISPATCH_MODE_FN_REGISTRY[dispatch_mode]


def register_dispatch_mode(dispatch_mode_name: str, dispatch_fn, collect_fn) -> None:
    """Add a new Dispatch member with its dispatch and collect functions."""
    mode = Dispatch.register(dispatch_mode_name)
    assert mode not in DISPATCH_MODE_FN_REGISTRY, f"dispatch mode {dispatch_mode_name} is already registered"
    DISPATCH_MODE_FN_REGISTRY[mode] = {"dispatch_fn": dispatch_fn, "collect_fn": collect_fn}


def update_dispatch_mode(dispatch_mode: Dispatch, dispatch_fn, collect_fn) -> None:
    """Replace the functions of an existing dispatch mode."""
    assert dispatch_mode in DISPATCH_MODE_FN_REGISTRY, f"dispatch mode {dispatch_mode} is not registered"
    DISPATCH_MODE_FN_REGISTRY[dispatch_mode] = {"dispatch_fn": dispatch_fn, "collect_fn": collect_fn}


_EXECUTE_FN_NAMES = {Execute.ALL: "execute_all", Execute.RANK_ZERO: "execute_rank_zero"}


def get_predefined_execute_fn(execute_mode: Execute) -> dict:
    """``{"execute_fn_name": ...}``: the worker-group method that runs a call in this mode."""
    return {"execute_fn_name": _EXECUTE_FN_NAMES[execute_mode]}


def _check_dispatch_mode(dispatch_mode) -> None:
    assert isinstance(dispatch_mode, Dispatch | dict), (
        f"dispatch_mode must be a Dispatch member or a dict with dispatch_fn/collect_fn, got {dispatch_mode!r}"
    )
    if isinstance(dispatch_mode, dict):
        missing = {"dispatch_fn", "collect_fn"} - set(dispatch_mode)
        assert not missing, f"custom dispatch_mode dict is missing {sorted(missing)}"


def _check_execute_mode(execute_mode) -> None:
    assert isinstance(execute_mode, Execute), f"execute_mode must be an Execute member, got {execute_mode!r}"


def _materialize_futures(*args, **kwargs):
    """Resolve DataProtoFuture arguments (results of non-blocking calls) into DataProtos."""
    args = tuple(arg.get() if isinstance(arg, DataProtoFuture) else arg for arg in args)
    kwargs = {k: v.get() if isinstance(v, DataProtoFuture) else v for k, v in kwargs.items()}
    return args, kwargs


def register(dispatch_mode=Dispatch.ALL_TO_ALL, execute_mode=Execute.ALL, blocking=True, materialize_futures=True):
    """Mark a worker method as callable from the driver through a worker group.

    Args:
        dispatch_mode: a :class:`Dispatch` member or ``{"dispatch_fn": f, "collect_fn": g}``.
        execute_mode: :class:`Execute` ``ALL`` or ``RANK_ZERO``.
        blocking: wait for the workers (True) or return futures / a DataProtoFuture (False).
        materialize_futures: resolve DataProtoFuture arguments before the method runs.
    """
    _check_dispatch_mode(dispatch_mode)
    _check_execute_mode(execute_mode)

    def decorator(func):
        if inspect.iscoroutinefunction(func):

            @functools.wraps(func)
            async def wrapper(*args, **kwargs):
                if materialize_futures:
                    args, kwargs = _materialize_futures(*args, **kwargs)
                return await func(*args, **kwargs)

        else:

            @functools.wraps(func)
            def wrapper(*args, **kwargs):
                # a Ray actor with max_concurrency > 1 runs its methods on threads of its own; an engine called there
                # must see the worker's CPU thread count, not the process's OpenMP default
                adopt_worker_threads()
                if materialize_futures:
                    args, kwargs = _materialize_futures(*args, **kwargs)
                return func(*args, **kwargs)

        setattr(
            wrapper, MAGIC_ATTR, {"dispatch_mode": dispatch_mode, "execute_mode": execute_mode, "blocking": blocking}
        )
        return wrapper

    return decorator


def _register_profiler_extension() -> None:
    """Make verl's profiler mixin (``verl.utils.debug.DistProfilerExtension``) callable from worker groups.

    Its ``start_profile``/``stop_profile`` run on every rank (ONE_TO_ALL). The mixin lives in utils, a layer below
    this one that cannot import ``register``, so the controller registers the two methods when it loads.
    """
    for name in ("start_profile", "stop_profile"):
        method = getattr(DistProfilerExtension, name)
        if not hasattr(method, MAGIC_ATTR):
            setattr(DistProfilerExtension, name, register(dispatch_mode=Dispatch.ONE_TO_ALL)(method))


_register_profiler_extension()
