"""`WorkerGroup`: the driver-side handle on a set of workers; turns `@register` worker methods into group calls."""

from __future__ import annotations

import logging
import signal
import threading
import time
from collections.abc import Callable

from verl.single_controller.base.decorator import (
    MAGIC_ATTR,
    Dispatch,
    get_predefined_dispatch_fn,
    get_predefined_execute_fn,
)

logger = logging.getLogger(__name__)


class ResourcePool:
    """How many worker processes run on each node (``process_on_nodes=[2, 3]``: 2 on node 0, 3 on node 1)."""

    def __init__(self, process_on_nodes=None, max_colocate_count: int = 10, n_gpus_per_node: int = 8) -> None:
        self._store = list(process_on_nodes) if process_on_nodes is not None else []
        self.max_colocate_count = max_colocate_count
        self.n_gpus_per_node = n_gpus_per_node

    def add_node(self, process_count: int) -> None:
        self._store.append(process_count)

    @property
    def world_size(self) -> int:
        return sum(self._store)

    def __call__(self) -> list[int]:
        return self._store

    @property
    def store(self) -> list[int]:
        return self._store

    def local_world_size_list(self) -> list[int]:
        """For every process: how many processes share its node."""
        return [count for count in self._store for _ in range(count)]

    def local_rank_list(self) -> list[int]:
        """For every process: its rank within its node."""
        return [rank for count in self._store for rank in range(count)]


class ClassWithInitArgs:
    """A class plus the arguments to build it with, so the group can build it where the worker lives."""

    def __init__(self, cls, *args, **kwargs) -> None:
        self.cls = cls
        self.args = args
        self.kwargs = kwargs
        self.fused_worker_used = False

    def __call__(self):
        return self.cls(*self.args, **self.kwargs)


def check_workers_alive(workers: list, is_alive: Callable, gap_time: float = 1) -> None:
    """Poll ``is_alive`` on every worker; abort the driver (SIGABRT) as soon as one has died."""
    while True:
        for worker in workers:
            if not is_alive(worker):
                logger.warning("worker %s is not alive, sending SIGABRT to the driver", worker)
                signal.raise_signal(signal.SIGABRT)
        time.sleep(gap_time)


class WorkerGroup:
    """Base of all worker groups: binds the registered methods of a worker class as group methods."""

    fused_worker_execute_fn_name = "_fuw_execute"

    def __init__(self, resource_pool: ResourcePool | None, **kwargs) -> None:
        self._is_init_with_detached_workers = resource_pool is None
        self.fused_worker_used = False
        self._procecss_dispatch_config = resource_pool() if resource_pool is not None else None  # [sic] verl's name
        self._workers: list = []
        self._worker_names: list[str] = []
        self._master_addr = None
        self._master_port = None
        self._checker_thread = None
        self.watchdog = None  # a Watchdog gives the group's calls deadlines (set_watchdog)
        self._role_prefix = ""  # "critic_" for the critic's group spawned from a colocated worker

    def phase_name(self, method_name: str) -> str:
        """The worker method a group method calls, without the role prefix of a colocated worker's method."""
        if self._role_prefix and method_name.startswith(self._role_prefix):
            return method_name[len(self._role_prefix) :]
        return method_name

    def _is_worker_alive(self, worker) -> bool:
        raise NotImplementedError

    def _block_until_all_workers_alive(self) -> None:
        while not all(self._is_worker_alive(worker) for worker in self._workers):
            time.sleep(1)

    def start_worker_aliveness_check(self, every_n_seconds: float = 1) -> None:
        """Start a daemon thread that aborts the driver when a worker dies."""
        self._block_until_all_workers_alive()
        self._checker_thread = threading.Thread(
            target=check_workers_alive, args=(self._workers, self._is_worker_alive, every_n_seconds), daemon=True
        )
        self._checker_thread.start()

    @property
    def world_size(self) -> int:
        return len(self._workers)

    def _bind_worker_method(self, user_defined_cls, func_generator) -> list[str]:
        """Create one group method per ``@register``ed method of ``user_defined_cls``; returns their names."""
        method_names = []
        for name in dir(user_defined_cls):
            try:
                method = getattr(user_defined_cls, name)
            except Exception:  # properties of some classes raise on class access
                continue
            if not callable(method) or not hasattr(method, MAGIC_ATTR):
                continue
            attrs = getattr(method, MAGIC_ATTR)
            dispatch_mode = attrs["dispatch_mode"]
            if isinstance(dispatch_mode, Dispatch):
                fns = get_predefined_dispatch_fn(dispatch_mode)
            else:
                assert isinstance(dispatch_mode, dict), f"{name}: dispatch_mode must be a Dispatch or a dict"
                fns = dispatch_mode
            execute_fn_name = get_predefined_execute_fn(attrs["execute_mode"])["execute_fn_name"]
            execute_fn = getattr(self, execute_fn_name)
            bound = func_generator(
                self,
                name,
                dispatch_fn=fns["dispatch_fn"],
                collect_fn=fns["collect_fn"],
                execute_fn=execute_fn,
                blocking=attrs["blocking"],
            )
            try:
                setattr(self, name, bound)
                method_names.append(name)
            except Exception as exc:
                raise ValueError(f"cannot bind registered method '{name}' on {type(self).__name__}") from exc
        return method_names


def make_group_method(worker_group, method_name: str, dispatch_fn, collect_fn, execute_fn, blocking: bool, resolve):
    """Build the driver-side callable for one registered method: dispatch, execute, wait, collect, unpad.

    ``resolve`` turns what ``execute_fn`` returned into values (``ray.get`` for Ray, identity in-process). The
    returned object's type is named after the method, so profilers and tracebacks show which call it was.
    """
    from verl.protocol import DataProto, DataProtoFuture, _padding_size_key

    def call(_self, *args, **kwargs):
        args, kwargs = dispatch_fn(worker_group, *args, **kwargs)
        padding_count = kwargs.pop(_padding_size_key, 0)
        watchdog = getattr(worker_group, "watchdog", None)
        phase = worker_group.phase_name(method_name) if watchdog is not None else method_name
        if watchdog is not None and watchdog.deadline(phase):
            start = lambda: execute_fn(method_name, *args, **kwargs)  # noqa: E731
            if blocking:
                output = worker_group._run_with_deadline(phase, start)
            else:  # the deadline runs from now and is enforced where the driver waits for the result
                output = worker_group._start_with_deadline(phase, start)
        else:
            output = execute_fn(method_name, *args, **kwargs)
            if blocking:
                output = resolve(output)
        output = collect_fn(worker_group, output)
        if padding_count:
            if isinstance(output, DataProto):
                output = output[: len(output) - padding_count]
            elif isinstance(output, DataProtoFuture):
                trim = output.dispatch_fn
                output = DataProtoFuture(
                    collect_fn=output.collect_fn,
                    futures=output.futures,
                    dispatch_fn=lambda value, _trim=trim: (value if _trim is None else _trim(value))[:-padding_count],
                )
            elif isinstance(output, list):
                output = output[:-padding_count]
        return output

    return type(method_name, (), {"__call__": call, "__doc__": f"worker-group call of {method_name}"})()
