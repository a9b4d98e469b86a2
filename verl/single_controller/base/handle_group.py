"""`HandleWorkerGroup`: what a worker group does whatever its backend holds the workers as.

A group holds one handle per worker process (a Ray actor, or a plain object in this process) and binds the
``@register``ed methods of the worker class as group methods. Spawning one group per role of a colocated worker,
fusing, calling every worker or rank 0, and the group's properties are the same for every backend; a backend says
how workers are created (``_init_with_resource_pool``), how one call reaches one worker
(``_execute_remote_single_worker``), how a pending result is waited for (``_resolve``), and how group methods are
made (``_func_generator``).
"""

from __future__ import annotations

import copy
import random
import string

from verl.single_controller.base.worker_group import ResourcePool, WorkerGroup

__all__ = ["HandleWorkerGroup", "random_name_prefix", "unwrap_actor_class"]


def random_name_prefix(length: int = 6) -> str:
    """A random prefix that keeps the names of a group's workers (and its register center) unique."""
    letters_digits = string.ascii_letters + string.digits
    return "".join(random.choice(letters_digits) for _ in range(length))


def unwrap_actor_class(cls):
    """The user's class behind a ``ray.remote`` actor class (or the class itself)."""
    return getattr(cls, "__ray_actor_class__", cls)


class HandleWorkerGroup(WorkerGroup):
    """A worker group over one handle per worker; subclasses supply the backend (see the module docstring)."""

    def __init__(
        self,
        resource_pool: ResourcePool | None = None,
        ray_cls_with_init=None,
        bin_pack: bool = True,
        name_prefix: str | None = None,
        detached: bool = False,
        worker_names: list[str] | None = None,
        worker_handles: list | None = None,
        device_name: str = "cuda",
        **kwargs,
    ) -> None:
        super().__init__(resource_pool=resource_pool, **kwargs)
        self.ray_cls_with_init = ray_cls_with_init
        self.name_prefix = random_name_prefix() if name_prefix is None else name_prefix
        self.fused_worker_used = ray_cls_with_init.fused_worker_used if ray_cls_with_init is not None else False
        self.sub_cls_name = ""
        self.device_name = device_name
        self.profile_steps = kwargs.get("profile_steps")
        self.worker_nsight_options = kwargs.get("worker_nsight_options")
        if self.worker_nsight_options is not None and self.worker_nsight_options.get("capture-range-end") is None:
            self.worker_nsight_options["capture-range-end"] = f"repeat-shutdown:{6 * len(self.profile_steps)}"

        if worker_names is not None and not self._is_init_with_detached_workers:
            raise AssertionError("worker_names can only be given when attaching to detached workers")
        if self._is_init_with_detached_workers:
            self._init_with_detached_workers(worker_names=worker_names, worker_handles=worker_handles)
        else:
            self._init_with_resource_pool(resource_pool, ray_cls_with_init, bin_pack, detached)

        if ray_cls_with_init is not None:
            self._bind_worker_method(unwrap_actor_class(self.ray_cls_with_init.cls), self._func_generator)
        self.wg_dict = None
        self.method_names: list[str] = []

    # ------------------------------------------------------------------------------------------- the backend
    @staticmethod
    def _func_generator(group, method_name, dispatch_fn, collect_fn, execute_fn, blocking):
        raise NotImplementedError

    def _init_with_resource_pool(self, resource_pool, ray_cls_with_init, bin_pack, detached) -> None:
        raise NotImplementedError

    def _init_with_detached_workers(self, worker_names, worker_handles) -> None:
        raise NotImplementedError

    def _execute_remote_single_worker(self, worker, method_name: str, *args, **kwargs):
        raise NotImplementedError

    def _resolve(self, pending):
        """The value(s) of what ``_execute_remote_single_worker`` returned (a list of them, or one)."""
        raise NotImplementedError

    def _run_with_deadline(self, phase: str, start):
        """``start()`` (which issues the call and returns what is pending) and its value(s), within the watchdog's
        deadline for ``phase``; raises :class:`~verl.single_controller.base.watchdog.WorkerGroupTimeout` past it."""
        raise NotImplementedError

    def _start_with_deadline(self, phase: str, start):
        """``start()`` of a non-blocking call (what is pending), the watchdog's deadline for ``phase`` counting from
        now and enforced when the driver waits for it (``DataProtoFuture.get``, ``resolve_result``). The in-process
        group has none: its calls all block (they run in the driver)."""
        raise NotImplementedError

    def set_watchdog(self, watchdog) -> None:
        """Give this group's blocking calls the deadlines of ``watchdog`` (a
        :class:`~verl.single_controller.base.watchdog.Watchdog`; None removes them)."""
        self.watchdog = watchdog

    @classmethod
    def from_detached(
        cls, name_prefix=None, worker_names=None, worker_handles=None, ray_cls_with_init=None, **kwargs
    ) -> HandleWorkerGroup:
        """Attach a group to running workers (by name or handle)."""
        return cls(
            resource_pool=None,
            ray_cls_with_init=ray_cls_with_init,
            name_prefix=name_prefix,
            worker_names=worker_names,
            worker_handles=worker_handles,
            **kwargs,
        )

    # ---------------------------------------------------------------------------------------- colocated groups
    def spawn(self, prefix_set) -> dict[str, HandleWorkerGroup]:
        """One group per role of a colocated worker, sharing this group's workers (``wg["critic"].update_critic``)."""
        if self.fused_worker_used:
            return self.spawn_fused(prefix_set)

        new_groups = {}
        for prefix in prefix_set:
            group = self.from_detached(
                name_prefix=self.name_prefix,
                worker_names=self._worker_names,
                worker_handles=self._workers,
                ray_cls_with_init=self.ray_cls_with_init,
                device_name=self.device_name,
            )
            group._master_addr, group._master_port = self._master_addr, self._master_port
            role_prefix = f"{prefix}_"
            group._role_prefix = role_prefix
            for method_name in dir(group):
                if method_name.startswith(role_prefix):
                    setattr(group, method_name[len(role_prefix) :], getattr(group, method_name))
            new_groups[prefix] = group
        return new_groups

    def spawn_fused(self, prefix_set) -> dict[str, HandleWorkerGroup]:
        """Sub-groups of a fused worker: each binds the methods of one role class."""
        groups = {}
        for key in prefix_set:
            group = copy.copy(self)  # shallow: sub-groups share the same worker handles
            raw_cls_dict = unwrap_actor_class(self.ray_cls_with_init.cls).raw_cls_dict
            group._bind_worker_method(raw_cls_dict[key], self._func_generator)
            group.sub_cls_name = key
            groups[key] = group
        return groups

    def fuse(self, prefix_set) -> None:
        """Expose each role of a fused worker as an attribute (``wg.actor.add(...)``)."""
        if self.wg_dict is None:
            self.wg_dict = self.spawn(prefix_set)
        for role_name, role_wg in self.wg_dict.items():
            setattr(self, role_name, role_wg)
        self.method_names = self._bind_worker_method(
            unwrap_actor_class(self.ray_cls_with_init.cls), self._func_generator
        )

    # ---------------------------------------------------------------------------------------------- execution
    def execute_rank_zero_sync(self, method_name: str, *args, **kwargs):
        return self._resolve(self.execute_rank_zero_async(method_name, *args, **kwargs))

    def execute_rank_zero_async(self, method_name: str, *args, **kwargs):
        return self._execute_remote_single_worker(self._workers[0], method_name, *args, **kwargs)

    def execute_rank_zero(self, method_name: str, *args, **kwargs):
        return self.execute_rank_zero_async(method_name, *args, **kwargs)

    def execute_all(self, method_name: str, *args, **kwargs):
        return self.execute_all_async(method_name, *args, **kwargs)

    def execute_all_sync(self, method_name: str, *args, **kwargs):
        return self._resolve(self.execute_all_async(method_name, *args, **kwargs))

    def execute_all_async(self, method_name: str, *args, **kwargs) -> list:
        """Call every worker; per-worker lists (one element per worker) are split, anything else is broadcast."""
        n = len(self._workers)
        values = list(args) + list(kwargs.values())
        if values and all(isinstance(v, list) and len(v) == n for v in values):
            return [
                self._execute_remote_single_worker(
                    worker, method_name, *(a[i] for a in args), **{k: v[i] for k, v in kwargs.items()}
                )
                for i, worker in enumerate(self._workers)
            ]
        return [self._execute_remote_single_worker(w, method_name, *args, **kwargs) for w in self._workers]

    # ---------------------------------------------------------------------------------------------- properties
    @property
    def master_address(self):
        return self._master_addr

    @property
    def master_port(self):
        return self._master_port

    @property
    def workers(self) -> list:
        return self._workers

    @property
    def world_size(self) -> int:
        return self._world_size

    @property
    def worker_names(self) -> list[str]:
        return self._worker_names
