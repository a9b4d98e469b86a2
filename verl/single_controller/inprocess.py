"""A worker group that runs its (single) worker inside the driver process, with no Ray.

The same worker classes and ``@register`` methods work unchanged, so a training step can be stepped through with a
debugger or run from a notebook. It accepts the constructor arguments of ``RayWorkerGroup`` (the trainer passes it as
``ray_worker_group_cls``), including colocated (``create_colocated_worker_cls``) and fused worker classes.
"""

from __future__ import annotations

import asyncio
import inspect
import os
import threading

from verl.single_controller.base.handle_group import HandleWorkerGroup, unwrap_actor_class
from verl.single_controller.base.worker import WorkerHelper
from verl.single_controller.base.worker_group import ResourcePool, make_group_method

_WORKER_ENV_KEYS = ("WG_PREFIX", "WG_BACKEND", "RAY_LOCAL_RANK", "RAY_LOCAL_WORLD_SIZE")


class _BackgroundLoop:
    """One event loop on a daemon thread, for ``async def`` worker methods (works inside Jupyter's own loop)."""

    _loop: asyncio.AbstractEventLoop | None = None
    _lock = threading.Lock()

    @classmethod
    def run(cls, coroutine):
        with cls._lock:
            if cls._loop is None:
                cls._loop = asyncio.new_event_loop()
                threading.Thread(target=cls._loop.run_forever, daemon=True, name="verl-inprocess-loop").start()
        return asyncio.run_coroutine_threadsafe(coroutine, cls._loop).result()


def _resolve(outputs):
    """Outputs of in-process calls are values already, except those of async methods (coroutines)."""
    if isinstance(outputs, list):
        return [_BackgroundLoop.run(o) if inspect.iscoroutine(o) else o for o in outputs]
    return _BackgroundLoop.run(outputs) if inspect.iscoroutine(outputs) else outputs


def _inprocess_func_generator(group, method_name, dispatch_fn, collect_fn, execute_fn, blocking):
    # Non-blocking calls run eagerly too: there is nothing to overlap with in one process.
    return make_group_method(group, method_name, dispatch_fn, collect_fn, execute_fn, True, resolve=_resolve)


def _set_single_process_env() -> None:
    """The environment a world-size-1 worker reads in Worker.__init__ (rendezvous on a free local port)."""
    for key in _WORKER_ENV_KEYS:
        os.environ.pop(key, None)
    os.environ.update({"WORLD_SIZE": "1", "RANK": "0", "LOCAL_WORLD_SIZE": "1", "LOCAL_RANK": "0"})
    import torch.distributed as dist

    if not dist.is_initialized():
        # a fresh port each time: one inherited from a parent process (or left by an earlier group) may be taken
        os.environ["MASTER_ADDR"] = "127.0.0.1"
        os.environ["MASTER_PORT"] = str(WorkerHelper._get_free_port())


class InProcessWorkerGroup(HandleWorkerGroup):
    """A world-size-1 worker group whose worker is a plain object in this process.

    It takes the constructor arguments of ``RayWorkerGroup`` (the trainer passes either as ``ray_worker_group_cls``);
    the Ray-only ones (placement, detached actors, the register-center timeout) mean nothing here and are ignored.
    """

    def __init__(self, resource_pool: ResourcePool | None = None, ray_cls_with_init=None, **kwargs) -> None:
        if resource_pool is not None and resource_pool.world_size != 1:
            raise ValueError(
                f"InProcessWorkerGroup runs exactly one worker, but the resource pool asks for "
                f"{resource_pool.world_size} ({resource_pool.store}); use RayWorkerGroup for more"
            )
        for ray_only in ("bin_pack", "detached", "ray_wait_register_center_timeout"):
            kwargs.pop(ray_only, None)
        super().__init__(resource_pool=resource_pool, ray_cls_with_init=ray_cls_with_init, **kwargs)

    @staticmethod
    def _func_generator(group, method_name, dispatch_fn, collect_fn, execute_fn, blocking):
        return _inprocess_func_generator(group, method_name, dispatch_fn, collect_fn, execute_fn, blocking)

    def _init_with_resource_pool(self, resource_pool, ray_cls_with_init, bin_pack, detached) -> None:
        _set_single_process_env()
        user_cls = unwrap_actor_class(ray_cls_with_init.cls)
        worker = user_cls(*ray_cls_with_init.args, **ray_cls_with_init.kwargs)
        self._workers = [worker]
        self._worker_names = [f"{self.name_prefix}{user_cls.__name__}_0:0"]
        self._world_size = 1
        self._master_addr, self._master_port = os.environ["MASTER_ADDR"], os.environ["MASTER_PORT"]

    def _init_with_detached_workers(self, worker_names, worker_handles) -> None:
        assert worker_handles, "InProcessWorkerGroup can only attach to worker objects it is given (worker_handles)"
        self._workers = list(worker_handles)
        self._worker_names = list(worker_names or [])
        self._world_size = len(self._workers)

    def _is_worker_alive(self, worker) -> bool:
        return True

    def _execute_remote_single_worker(self, worker, method_name: str, *args, **kwargs):
        if self.fused_worker_used and method_name not in self.method_names:
            return getattr(worker, self.fused_worker_execute_fn_name)(
                f"{self.sub_cls_name}_fwmn_{method_name}", *args, **kwargs
            )
        return getattr(worker, method_name)(*args, **kwargs)

    def _resolve(self, pending):
        return _resolve(pending)

    def _run_with_deadline(self, phase: str, start):
        # the call runs right here, in the driver: the watchdog interrupts it from a timer thread
        with self.watchdog.in_process(phase):
            return _resolve(start())
