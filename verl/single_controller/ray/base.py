"""Ray backend of the single controller: resource pools as placement groups, workers as Ray actors."""

from __future__ import annotations

import concurrent.futures
import inspect
import logging
import os
import time
from typing import TYPE_CHECKING, Any

from verl.single_controller.base import ClassWithInitArgs, ResourcePool, Worker
from verl.single_controller.base.decorator import MAGIC_ATTR, Dispatch
from verl.single_controller.base.handle_group import HandleWorkerGroup, random_name_prefix, unwrap_actor_class
from verl.single_controller.base.worker_group import make_group_method

if TYPE_CHECKING:
    from ray.util.placement_group import PlacementGroup

# Ray is imported inside the functions that talk to it, so the trainer and the workers (which import this module)
# load on a machine without Ray and run there through the in-process group or torchrun.

__all__ = ["Worker"]

logger = logging.getLogger(__name__)

FusedWorkerCLSName = "FusedWorker"


def get_random_string(length: int) -> str:
    """A random string of letters and digits (verl's name here, kept for code that imports it from this module)."""
    return random_name_prefix(length)


def ray_actor_class(cls):
    """``ray.remote(cls)`` where Ray is installed, else ``cls`` itself.

    The Ray worker group needs actor classes; the in-process group unwraps them (or takes the plain class), so the
    trainer builds its worker classes this way and still runs in-process or under torchrun where Ray is absent.
    """
    try:
        import ray
    except ImportError:
        return cls
    return ray.remote(cls)


def func_generator(self, method_name, dispatch_fn, collect_fn, execute_fn, blocking):
    """The group method for a registered worker method (see ``make_group_method``), waiting with ``ray.get``; a
    :class:`RayWorkerGroup` also reports a worker lost during the call (``WorkerLostError``)."""
    import ray

    if isinstance(self, RayWorkerGroup):

        def resolve(pending):
            return self._get_reporting_loss(self.phase_name(method_name), pending)

    else:
        resolve = ray.get
    return make_group_method(self, method_name, dispatch_fn, collect_fn, execute_fn, blocking, resolve=resolve)


class PendingCall(list):
    """The ObjectRefs of a non-blocking worker-group call under a watchdog: a plain list of them (``ray.get`` takes
    it, as in verl), whose :meth:`wait` gives their values within the call's deadline (counted from when it was
    issued) with the reports of a blocking call: :class:`WorkerGroupTimeout` with every worker's stacks, or
    :class:`WorkerLostError`. ``DataProtoFuture.get`` and ``resolve_result`` wait through it. Pickled (sent to a
    worker inside a DataProtoFuture argument) it is a plain list."""

    def __init__(self, refs: list, group: RayWorkerGroup, phase: str, deadline_at: float) -> None:
        super().__init__(refs)
        self.group, self.phase, self.deadline_at = group, phase, deadline_at

    def wait(self) -> list:
        """The values of the refs, in order."""
        return self.group._wait_reporting(self.phase, list(self), self.deadline_at)

    def __reduce__(self):
        return list, (list(self),)


def _request_stacks(pid: int, path: str, signum: int, wait_s: float = 1.0) -> str:
    """On the worker's node: empty its stack file, signal it to write its stacks, and return what it wrote."""
    with open(path, "w"):
        pass
    os.kill(pid, signum)
    deadline = time.monotonic() + wait_s * 5
    text, last = "", -1
    while time.monotonic() < deadline:  # done when the file stops growing
        time.sleep(wait_s / 5)
        with open(path) as f:
            text = f.read()
        if text and len(text) == last:
            break
        last = len(text)
    return text


def sort_placement_group_by_node_ip(pgs: list[PlacementGroup]) -> list[PlacementGroup]:
    """Order placement groups by the IP of their node so rank -> node stays stable across restarts."""
    import ray

    node_ip = {node["NodeID"]: node["NodeManagerAddress"] for node in ray.nodes()}
    pg_ip = {}
    for pg in pgs:
        specs = ray._private.state.state.placement_group_table(pg.id)
        node_id = specs["bundles_to_node_id"][0]
        pg_ip[pg.id] = node_ip[node_id]
    return sorted(pgs, key=lambda pg: pg_ip[pg.id])


class RayResourcePool(ResourcePool):
    """A resource pool realised as one Ray placement group per node entry.

    Each process gets a bundle with one GPU (or NPU) where ``use_gpu``; on a CPU-only cluster each bundle is CPU only,
    and every worker process is still one bundle.
    """

    def __init__(
        self,
        process_on_nodes: list[int] | None = None,
        use_gpu: bool = True,
        name_prefix: str | None = None,
        max_colocate_count: int = 10,
        detached: bool = False,
        accelerator_type: str | None = None,
    ) -> None:
        super().__init__(process_on_nodes, max_colocate_count)
        self.use_gpu = use_gpu
        self.name_prefix = random_name_prefix() if name_prefix is None else name_prefix
        self.pgs = None
        self.detached = detached
        self.accelerator_type = accelerator_type

    def bundle_cpus(self) -> float:
        """CPUs reserved per process. On GPU nodes verl reserves max_colocate_count; a CPU box has few cores."""
        return self.max_colocate_count if self.use_gpu else 1

    def get_placement_groups(self, strategy: str = "STRICT_PACK", name: str | None = None, device_name: str = "cuda"):
        """Create (once) and return the placement groups, blocking until they are ready."""
        from ray.util.placement_group import placement_group

        if self.pgs is not None:
            return self.pgs
        pg_name_prefix = name if name else f"{self.name_prefix}verl_group_{'_'.join(str(c) for c in self._store)}:"
        bundle: dict[str, float] = {"CPU": self.bundle_cpus()}
        if self.use_gpu:
            bundle["NPU" if device_name == "npu" else "GPU"] = 1
            if self.accelerator_type is not None:
                bundle[self.accelerator_type] = 1e-4
        lifetime = "detached" if self.detached else None
        pgs = [
            placement_group(
                bundles=[dict(bundle) for _ in range(count)],
                strategy=strategy,
                name=pg_name_prefix + str(idx),
                lifetime=lifetime,
            )
            for idx, count in enumerate(self._store)
        ]
        _wait_placement_groups(pgs, self)
        self.pgs = pgs
        return pgs


def _wait_placement_groups(pgs: list[PlacementGroup], pool: RayResourcePool, timeout_s: float = 300) -> None:
    """Wait for every placement group; say which resources are missing instead of hanging silently."""
    import ray

    ready, _ = ray.wait([pg.ready() for pg in pgs], num_returns=len(pgs), timeout=timeout_s)
    if len(ready) < len(pgs):
        raise TimeoutError(
            f"resource pool {pool.name_prefix} ({pool.store} processes, use_gpu={pool.use_gpu}) could not be placed "
            f"within {timeout_s}s; the cluster has {ray.cluster_resources()}"
        )


def extract_pg_from_exist(
    resource_pools: dict[str, RayResourcePool], src_role_names: list[str], resource_pool: RayResourcePool
) -> list:
    """Reuse placement groups of existing pools, largest first, for a new pool of the given shape."""
    src_pgs = [
        pg
        for role_name, pool in resource_pools.items()
        for pg in pool.get_placement_groups()
        if role_name in src_role_names
    ]
    sorted_src = sorted(src_pgs, key=lambda pg: pg.bundle_count, reverse=True)
    sorted_counts = sorted(enumerate(resource_pool.store), key=lambda x: x[1], reverse=True)
    unsorted: list[tuple[int, Any]] = []
    searching = 0
    for original_idx, count in sorted_counts:
        assert searching < len(sorted_src), f"no placement group left for a node with {count} processes"
        assert count <= sorted_src[searching].bundle_count, (
            f"requested {count} processes but the placement group has {sorted_src[searching].bundle_count} bundles"
        )
        unsorted.append((original_idx, sorted_src[searching]))
        searching += 1
    return [pg for _, pg in sorted(unsorted)]


def merge_resource_pool(rp1: RayResourcePool, rp2: RayResourcePool) -> RayResourcePool:
    """One pool holding the nodes (and placement groups) of both."""
    assert rp1.use_gpu == rp2.use_gpu, "merge_resource_pool: both pools must agree on use_gpu"
    assert rp1.max_colocate_count == rp2.max_colocate_count, "merge_resource_pool: max_colocate_count differs"
    assert rp1.n_gpus_per_node == rp2.n_gpus_per_node, "merge_resource_pool: n_gpus_per_node differs"
    assert rp1.detached == rp2.detached, "merge_resource_pool: detached differs"
    merged = RayResourcePool(rp1.store + rp2.store, rp1.use_gpu, f"{rp1.name_prefix}_{rp2.name_prefix}")
    merged.pgs = rp1.get_placement_groups() + rp2.get_placement_groups()
    return merged


class RayClassWithInitArgs(ClassWithInitArgs):
    """A Ray actor class plus init args; builds the actor inside a given placement-group bundle."""

    def __init__(self, cls, *args, **kwargs) -> None:
        super().__init__(cls, *args, **kwargs)
        self._options: dict = {}
        self._additional_resource: dict = {}

    def set_additional_resource(self, additional_resource: dict) -> None:
        self._additional_resource = additional_resource

    def update_options(self, options: dict) -> None:
        self._options.update(options)

    def __call__(
        self,
        placement_group,
        placement_group_bundle_idx: int,
        use_gpu: bool = True,
        num_gpus: float = 1,
        sharing_with=None,
        device_name: str = "cuda",
        num_cpus: float | None = None,
    ):
        import ray
        from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy, PlacementGroupSchedulingStrategy

        if sharing_with is not None:
            target_node_id = ray.get(sharing_with.get_node_id.remote())
            visible_devices = ray.get(sharing_with.get_cuda_visible_devices.remote())
            options = {"scheduling_strategy": NodeAffinitySchedulingStrategy(node_id=target_node_id, soft=False)}
            return self.cls.options(**options).remote(*self.args, cuda_visible_devices=visible_devices, **self.kwargs)
        options = {
            "scheduling_strategy": PlacementGroupSchedulingStrategy(
                placement_group=placement_group, placement_group_bundle_index=placement_group_bundle_idx
            )
        }
        options.update(self._options)
        if use_gpu and device_name == "cuda":
            options["num_gpus"] = num_gpus
        elif use_gpu and device_name == "npu":
            options["resources"] = {"NPU": num_gpus}
        if num_cpus is not None:
            options["num_cpus"] = num_cpus
        if self._additional_resource:
            options.update(self._additional_resource)
        return self.cls.options(**options).remote(*self.args, **self.kwargs)


class RayWorkerGroup(HandleWorkerGroup):
    """A group of Ray actors running the same Worker class; registered methods become group methods."""

    def __init__(
        self,
        resource_pool: RayResourcePool | None = None,
        ray_cls_with_init: RayClassWithInitArgs | None = None,
        bin_pack: bool = True,
        name_prefix: str | None = None,
        detached: bool = False,
        worker_names: list[str] | None = None,
        worker_handles: list | None = None,
        ray_wait_register_center_timeout: int = 300,
        device_name: str = "cuda",
        **kwargs,
    ) -> None:
        self._ray_wait_register_center_timeout = ray_wait_register_center_timeout
        super().__init__(
            resource_pool=resource_pool,
            ray_cls_with_init=ray_cls_with_init,
            bin_pack=bin_pack,
            name_prefix=name_prefix,
            detached=detached,
            worker_names=worker_names,
            worker_handles=worker_handles,
            device_name=device_name,
            **kwargs,
        )

    # ------------------------------------------------------------------------------------------- construction
    @staticmethod
    def _func_generator(group, method_name, dispatch_fn, collect_fn, execute_fn, blocking):
        return func_generator(group, method_name, dispatch_fn, collect_fn, execute_fn, blocking)

    def _is_worker_alive(self, worker) -> bool:
        from ray.util.state import get_actor

        state = get_actor(worker._actor_id.hex())
        return state.get("state") == "ALIVE" if isinstance(state, dict) else getattr(state, "state", None) == "ALIVE"

    def _init_with_detached_workers(self, worker_names, worker_handles) -> None:
        import ray

        workers = worker_handles if worker_handles else [ray.get_actor(name=name) for name in worker_names]
        self._workers = list(workers)
        self._worker_names = list(worker_names) if worker_names else []
        self._world_size = len(self._workers)

    def _user_class_name(self, ray_cls_with_init) -> str:
        return unwrap_actor_class(ray_cls_with_init.cls).__name__

    def _init_with_resource_pool(self, resource_pool, ray_cls_with_init, bin_pack, detached) -> None:
        from verl.single_controller.base.register_center.ray import TIMEOUT_ENV, wait_rank_zero_info

        use_gpu = resource_pool.use_gpu
        strategy = "STRICT_PACK" if bin_pack else "PACK"
        pgs = resource_pool.get_placement_groups(strategy=strategy, device_name=self.device_name)
        if len(pgs) > 1:
            pgs = sort_placement_group_by_node_ip(pgs)
        world_size = resource_pool.world_size
        self._world_size = world_size
        num_gpus = 1 / resource_pool.max_colocate_count
        # on CPU, several groups may share one bundle (colocation without fusing): each takes a share of its CPU
        num_cpus = None if use_gpu else resource_pool.bundle_cpus() / resource_pool.max_colocate_count
        class_name = self._user_class_name(ray_cls_with_init)
        local_world_size = resource_pool.store[0]

        # environment variables the caller set on the class (a trainer's actor options) reach every worker
        base_env = dict(ray_cls_with_init._options.get("runtime_env", {}).get("env_vars", {}))
        rank = -1
        for pg_idx, pg in enumerate(pgs):
            assert local_world_size <= pg.bundle_count, (
                f"placement group {pg_idx} has {pg.bundle_count} bundles, fewer than {local_world_size} processes"
            )
            for local_rank in range(local_world_size):
                rank += 1
                env_vars = {
                    **base_env,
                    "WORLD_SIZE": str(world_size),
                    "RANK": str(rank),
                    "WG_PREFIX": self.name_prefix,
                    "WG_BACKEND": "ray",
                    "RAY_LOCAL_WORLD_SIZE": str(local_world_size),
                    "RAY_LOCAL_RANK": str(local_rank),
                }
                if rank != 0:  # the other ranks start at once and read rank 0's address from its register center
                    env_vars[TIMEOUT_ENV] = str(self._ray_wait_register_center_timeout)
                name = f"{self.name_prefix}{class_name}_{pg_idx}:{local_rank}"
                ray_cls_with_init.update_options({"runtime_env": {"env_vars": env_vars}, "name": name})
                if detached:
                    ray_cls_with_init.update_options({"lifetime": "detached"})
                worker = ray_cls_with_init(
                    placement_group=pg,
                    placement_group_bundle_idx=local_rank,
                    use_gpu=use_gpu,
                    num_gpus=num_gpus,
                    device_name=self.device_name,
                    num_cpus=num_cpus,
                )
                self._workers.append(worker)
                self._worker_names.append(name)
        # rank 0 publishes its rendezvous address through a named register-center actor once it is up
        _, info = wait_rank_zero_info(f"{self.name_prefix}_register_center", self._ray_wait_register_center_timeout)
        self._master_addr, self._master_port = info["MASTER_ADDR"], info["MASTER_PORT"]

    # ---------------------------------------------------------------------------------------------- execution
    def _execute_remote_single_worker(self, worker, method_name: str, *args, **kwargs):
        if self.fused_worker_used and method_name not in self.method_names:
            remote_call = getattr(worker, self.fused_worker_execute_fn_name)
            return remote_call.remote(f"{self.sub_cls_name}_fwmn_{method_name}", *args, **kwargs)
        return getattr(worker, method_name).remote(*args, **kwargs)

    def _resolve(self, pending):
        import ray

        return ray.get(pending)

    def set_watchdog(self, watchdog) -> None:
        """As the base; also learns each worker's node and process id, needed to ask for its stacks later."""
        import ray

        super().set_watchdog(watchdog)
        if watchdog is not None and not getattr(self, "_worker_processes", None):  # a group's processes stay put
            timeout = watchdog.deadline("init_model") or None
            refs = [w.watchdog_process_info.remote() for w in self._workers]
            self._worker_processes = ray.get(refs, timeout=timeout)

    def _start_with_deadline(self, phase: str, start):
        issued = time.monotonic()
        pending = start()
        if not isinstance(pending, list):  # one ref (a rank-zero call) stays one: verl's callers expect an ObjectRef
            return pending
        return PendingCall(pending, self, phase, issued + self.watchdog.deadline(phase))

    def _run_with_deadline(self, phase: str, start):
        issued = time.monotonic()
        return self._wait_reporting(phase, start(), issued + self.watchdog.deadline(phase))

    def _get_reporting_loss(self, phase: str, pending):
        """``ray.get(pending)``; a worker that died turns into :class:`WorkerLostError` naming the role, the phase,
        the memory of the worker's node and (with a watchdog) the settings that lower the phase's memory."""
        return self._wait_reporting(phase, pending, None)

    def _wait_reporting(self, phase: str, pending, deadline_at: float | None):
        """The value(s) of ``pending`` (one ObjectRef or a list), waiting until ``deadline_at`` (``time.monotonic``;
        None: no deadline). Past it: :class:`WorkerGroupTimeout` with every worker's stacks. A worker that died:
        :class:`WorkerLostError`, also when a peer's error (a collective that lost its peer) arrived first."""
        import ray

        refs = pending if isinstance(pending, list) else [pending]
        values, remaining = {}, list(refs)
        while remaining:
            timeout = None if deadline_at is None else max(0.0, deadline_at - time.monotonic())
            ready, remaining = ray.wait(remaining, num_returns=1, timeout=timeout)
            if not ready:
                stuck = [i for i, ref in enumerate(refs) if ref in remaining]
                raise self.watchdog.timed_out(phase, stuck, self._collect_stacks())
            for ref in ready:
                try:
                    values[ref] = ray.get(ref)
                except (ray.exceptions.RayActorError, ray.exceptions.OutOfMemoryError) as e:
                    raise self._worker_lost(phase, e) from e
                except ray.exceptions.RayTaskError as e:
                    lost = self._lost_peer(remaining)
                    if lost is not None:
                        raise self._worker_lost(phase, lost) from e
                    raise
        return [values[ref] for ref in refs] if isinstance(pending, list) else values[refs[0]]

    def _lost_peer(self, refs, wait_s: float = 10.0):
        """The RayActorError of a worker among ``refs`` that died (waiting up to ``wait_s`` for Ray to notice), or
        None: when one rank fails in a collective because a peer was killed, the peer is the news."""
        import ray

        deadline = time.monotonic() + wait_s
        remaining = list(refs)
        while remaining and time.monotonic() < deadline:
            ready, remaining = ray.wait(remaining, num_returns=1, timeout=max(0.0, deadline - time.monotonic()))
            for ref in ready:
                try:
                    ray.get(ref)
                except (ray.exceptions.RayActorError, ray.exceptions.OutOfMemoryError) as e:
                    return e
                except Exception:
                    continue
        return None

    def _worker_lost(self, phase: str, error: Exception):
        from verl.single_controller.base.watchdog import WorkerLostError

        actor_id = getattr(error, "actor_id", None)
        ranks = [i for i, w in enumerate(self._workers) if actor_id and w._actor_id.hex() == actor_id]
        role = self._role_prefix.rstrip("_")
        if not role:
            role = self._user_class_name(self.ray_cls_with_init) if self.ray_cls_with_init is not None else "a"
        hints = list((self.watchdog.memory_hints if self.watchdog is not None else {}).get(phase, []))
        cause = " ".join(str(error).split())[:600]
        return WorkerLostError(role, phase, ranks, cause, self._memory_of(ranks), hints)

    def _memory_of(self, ranks: list[int], via_node_task: bool = False) -> str:
        """The memory of the node the first of ``ranks`` ran on, with the worker's last heartbeat sample: read here on
        the driver's node, else by a zero-CPU task pinned to the worker's; the driver's host when the worker's node is
        not known or does not answer."""
        import ray
        from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

        from verl.single_controller.base.watchdog import host_memory_summary, memory_report

        processes = getattr(self, "_worker_processes", None) or []
        if ranks and ranks[0] < len(processes) and processes[ranks[0]][0] is not None:
            node_id, pid, _ = processes[ranks[0]]
            if node_id == ray.get_runtime_context().get_node_id() and not via_node_task:  # the driver's node
                return f"of the worker's node {node_id[:8]} {memory_report(pid)}"
            strategy = NodeAffinitySchedulingStrategy(node_id=node_id, soft=False)
            try:
                report = ray.remote(num_cpus=0)(memory_report).options(scheduling_strategy=strategy).remote(pid)
                return f"of the worker's node {node_id[:8]} {ray.get(report, timeout=30)}"
            except Exception as e:  # the node itself is gone: say so and fall back to the driver's host
                return f"of the worker's node {node_id[:8]}: unknown ({type(e).__name__}); the driver's host: " + (
                    host_memory_summary()
                )
        return f"of the driver's host (the worker's node is unknown): {host_memory_summary()}"

    def _collect_stacks(self, via_node_tasks: bool = False) -> dict[int, str]:
        """Every worker's Python stacks (all threads); ``{rank: text}``. A worker on another node (on any node with
        ``via_node_tasks``) is asked through a zero-CPU task pinned to its node."""
        import ray
        from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

        from verl.single_controller.base.watchdog import STACK_SIGNAL

        request = ray.remote(num_cpus=0)(_request_stacks)
        here = ray.get_runtime_context().get_node_id()
        pending = {}
        with concurrent.futures.ThreadPoolExecutor(max_workers=8) as pool:
            for rank, (node_id, pid, path) in enumerate(getattr(self, "_worker_processes", [])):
                if path is None:
                    continue
                if node_id == here and not via_node_tasks:  # signalled from here: no task to start
                    pending[rank] = pool.submit(_request_stacks, pid, path, int(STACK_SIGNAL))
                else:
                    strategy = NodeAffinitySchedulingStrategy(node_id=node_id, soft=False)
                    ref = request.options(scheduling_strategy=strategy).remote(pid, path, int(STACK_SIGNAL))
                    pending[rank] = pool.submit(ray.get, ref, timeout=30)
            stacks = {}
            for rank, future in pending.items():
                try:
                    stacks[rank] = future.result()
                except Exception as e:  # a dead node or worker: say so in its dump instead of failing the report
                    stacks[rank] = f"could not collect the stacks of rank {rank}: {type(e).__name__}: {e}"
        return stacks


# ------------------------------------------------------------------------------------------------- colocation
def _find_worker_base(cls):
    actor_cls = unwrap_actor_class(cls)
    for klass in actor_cls.__mro__:
        if klass.__name__ in ("MegatronWorker", "Worker"):
            assert issubclass(klass, Worker), f"{klass} must subclass Worker"
            return klass
    raise TypeError(f"{actor_cls.__name__} does not derive from Worker")


def _with_worker_init_disabled(build):
    """Build role workers inside a colocated actor without re-running the rank/rendezvous set-up."""
    previous = os.environ.get("DISABLE_WORKER_INIT")
    os.environ["DISABLE_WORKER_INIT"] = "1"
    try:
        return build()
    finally:
        if previous is None:
            os.environ.pop("DISABLE_WORKER_INIT", None)
        else:
            os.environ["DISABLE_WORKER_INIT"] = previous


def _delegating_method(key: str, name: str, method):
    """A WorkerDict method that forwards to ``self.worker_dict[key].<name>`` (async stays async)."""
    if inspect.iscoroutinefunction(method):

        async def forward(self, *args, **kwargs):
            return await getattr(self.worker_dict[key], name)(*args, **kwargs)

    else:

        def forward(self, *args, **kwargs):
            return getattr(self.worker_dict[key], name)(*args, **kwargs)

    setattr(forward, MAGIC_ATTR, getattr(method, MAGIC_ATTR))
    forward.__name__ = f"{key}_{name}"
    return forward


def create_colocated_worker_cls(class_dict: dict[str, RayClassWithInitArgs]) -> RayClassWithInitArgs:
    """One actor class hosting several role workers (``actor_rollout``, ``critic``, ...) in the same process.

    Role ``key``'s registered method ``m`` becomes ``key_m``; ``RayWorkerGroup.spawn`` maps it back to ``m``.
    """
    base = _find_worker_base(next(iter(class_dict.values())).cls)
    raw_classes = {key: unwrap_actor_class(c.cls) for key, c in class_dict.items()}
    init_args = {key: (c.args, c.kwargs) for key, c in class_dict.items()}

    class WorkerDict(base):
        def __init__(self):
            super().__init__()
            self.worker_dict = {}
            for key, user_cls in raw_classes.items():
                args, kwargs = init_args[key]
                self.worker_dict[key] = _with_worker_init_disabled(lambda c=user_cls, a=args, k=kwargs: c(*a, **k))

    for key, user_cls in raw_classes.items():
        for name in dir(user_cls):
            method = getattr(user_cls, name, None)
            if method is None or not hasattr(method, MAGIC_ATTR):
                continue
            direct = getattr(method, MAGIC_ATTR)["dispatch_mode"] == Dispatch.DIRECT_ROLLOUT_METHOD
            if direct and "rollout" in key:
                assert not hasattr(WorkerDict, name), f"direct rollout method {name} clashes with an existing name"
                forward = _delegating_method(key, name, method)
                forward.__name__ = name
                setattr(WorkerDict, name, forward)
            else:
                setattr(WorkerDict, f"{key}_{name}", _delegating_method(key, name, method))
    return RayClassWithInitArgs(cls=ray_actor_class(WorkerDict))


def create_colocated_worker_raw_cls(class_dict: dict[str, RayClassWithInitArgs]):
    """A Worker subclass that instantiates every role class as an attribute (fused worker, not yet ray.remote)."""
    raw_cls_dict = {key: unwrap_actor_class(c.cls) for key, c in class_dict.items()}
    init_args = {key: (c.args, c.kwargs) for key, c in class_dict.items()}
    base = _find_worker_base(next(iter(class_dict.values())).cls)
    fused_name = FusedWorkerCLSName + "_" + "_".join(class_dict.keys())

    def __init__(self, *args, **kwargs):
        base.__init__(self, *args, **kwargs)
        for key, user_cls in raw_cls_dict.items():
            user_cls._get_ray_actor_cls_name = lambda _self, n=fused_name: n
            user_cls._get_ray_method_prefix = lambda _self, k=key: f"{k}_"
            a, k = init_args[key]
            instance = _with_worker_init_disabled(lambda c=user_cls, a=a, k=k: c(*a, **k))
            self.fused_worker_dict[key] = instance
            setattr(self, key, instance)
        for instance in self.fused_worker_dict.values():
            setattr(instance, Worker.fused_worker_attr_name, self.fused_worker_dict)

    def _fuw_execute(self, method_name: str, *args, **kwargs):
        key, _, name = method_name.partition("_fwmn_")
        assert key in self.fused_worker_dict, f"fused worker has no role '{key}' (method {method_name})"
        return getattr(self.fused_worker_dict[key], name)(*args, **kwargs)

    return type(
        fused_name,
        (base,),
        {
            "__init__": __init__,
            "_fuw_execute": _fuw_execute,
            "is_fused_worker": True,
            "raw_cls_dict": raw_cls_dict,
        },
    )


def create_colocated_worker_cls_fused(class_dict: dict[str, RayClassWithInitArgs]) -> RayClassWithInitArgs:
    """The fused worker class of ``class_dict`` as a Ray actor class, marked ``fused_worker_used``."""
    raw = create_colocated_worker_raw_cls(class_dict)
    cls_with_init = RayClassWithInitArgs(cls=ray_actor_class(raw))
    cls_with_init.fused_worker_used = True
    return cls_with_init
