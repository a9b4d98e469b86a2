"""`Worker`: the base class of every process a worker group drives (one per device or CPU bundle)."""

from __future__ import annotations

import os
import socket
from dataclasses import dataclass

from verl.single_controller.base.decorator import Dispatch, Execute, register


@dataclass
class DistRankInfo:
    tp_rank: int
    dp_rank: int
    pp_rank: int
    cp_rank: int


@dataclass
class DistGlobalInfo:
    tp_size: int
    dp_size: int
    pp_size: int
    cp_size: int


class WorkerHelper:
    """Node address and free-port discovery used to set up torch.distributed rendezvous."""

    @staticmethod
    def _get_node_ip() -> str:
        host_ip = os.getenv("MY_HOST_IP") or os.getenv("MY_HOST_IPV6")
        if host_ip:
            return host_ip
        if os.getenv("WG_BACKEND") == "ray":
            import ray

            return ray.util.get_node_ip_address().strip("[]")
        raise NotImplementedError("node IP discovery needs WG_BACKEND=ray or MY_HOST_IP/MY_HOST_IPV6 set")

    @staticmethod
    def _get_free_port() -> int:
        with socket.socket() as sock:
            sock.bind(("", 0))
            return sock.getsockname()[1]

    def get_availale_master_addr_port(self) -> tuple[str, str]:  # [sic] verl's spelling, kept for compatibility
        return self._get_node_ip().strip("[]"), str(self._get_free_port())

    def _get_pid(self) -> int:
        return os.getpid()


class Worker(WorkerHelper):
    """A process in a worker group: knows its rank, world size and the rendezvous address of rank 0.

    Subclasses call ``super().__init__()`` first, then build models and may call
    ``torch.distributed.init_process_group`` (env:// rendezvous through MASTER_ADDR/MASTER_PORT).
    """

    fused_worker_attr_name = "fused_worker_dict"

    def __new__(cls, *args, **kwargs):
        instance = super().__new__(cls)
        # set when a worker is built inside another actor (colocation): that actor already did the set-up
        if int(os.environ.get("DISABLE_WORKER_INIT", 0)):
            return instance
        rank = os.environ.get("RANK")
        prefix = os.environ.get("WG_PREFIX")
        if rank is not None and prefix is not None and "ActorClass(" not in cls.__name__:
            instance._configure_before_init(f"{prefix}_register_center", int(rank))
        return instance

    def _configure_before_init(self, register_center_name: str, rank: int) -> None:
        assert isinstance(rank, int), f"rank must be an int, got {type(rank)}"
        if rank == 0:
            master_addr, master_port = self.get_availale_master_addr_port()
            info = {"MASTER_ADDR": master_addr, "MASTER_PORT": master_port}
            if os.getenv("WG_BACKEND") == "ray":
                from verl.single_controller.base.register_center.ray import create_worker_group_register_center

                self.register_center = create_worker_group_register_center(name=register_center_name, info=info)
            os.environ.update(info)
        elif os.getenv("WG_BACKEND") == "ray":
            from verl.single_controller.base.register_center.ray import TIMEOUT_ENV, wait_rank_zero_info

            # started beside rank 0, not after it: its address comes from its register center (never from the
            # environment, which may hold a MASTER_ADDR the process inherited from the driver's shell)
            timeout = float(os.getenv(TIMEOUT_ENV, "300"))
            self.register_center, info = wait_rank_zero_info(register_center_name, timeout)
            os.environ.update(info)
        if os.getenv("WG_BACKEND") == "ray":
            import ray

            # fire and forget: calls from one caller run in order, and a blocking get would stall async actors
            self.register_center.set_worker_info.remote(rank, ray.get_runtime_context().get_node_id())

    @classmethod
    def env_keys(cls) -> list[str]:
        """Environment variables a worker reads its placement from."""
        return [
            "WORLD_SIZE",
            "RANK",
            "LOCAL_WORLD_SIZE",
            "LOCAL_RANK",
            "MASTER_ADDR",
            "MASTER_PORT",
            "CUDA_VISIBLE_DEVICES",
        ]

    def __init__(self, cuda_visible_devices: str | None = None) -> None:
        self._normalize_visible_devices()
        missing = [key for key in ("WORLD_SIZE", "RANK", "MASTER_ADDR", "MASTER_PORT") if key not in os.environ]
        if missing:
            raise RuntimeError(
                f"{type(self).__name__} needs environment variables {missing}; create workers through a worker group "
                "(RayWorkerGroup or InProcessWorkerGroup), which sets them"
            )
        self._world_size = int(os.environ["WORLD_SIZE"])
        self._rank = int(os.environ["RANK"])
        self._master_addr = os.environ["MASTER_ADDR"]
        self._master_port = os.environ["MASTER_PORT"]
        # A Ray worker group names the host-local placement RAY_LOCAL_* (set per worker, so it beats a LOCAL_* the
        # worker inherited from the driver's environment); the rest of the worker (its share of a CPU host's cores,
        # the engines on the host) reads LOCAL_*.
        self._local_world_size = int(os.getenv("RAY_LOCAL_WORLD_SIZE") or os.getenv("LOCAL_WORLD_SIZE") or 1)
        self._local_rank = int(os.getenv("RAY_LOCAL_RANK") or os.getenv("LOCAL_RANK") or 0)
        self._cuda_visible_devices = cuda_visible_devices

        values = {
            "WORLD_SIZE": self._world_size,
            "RANK": self._rank,
            "LOCAL_WORLD_SIZE": self._local_world_size,
            "LOCAL_RANK": self._local_rank,
            "MASTER_ADDR": self._master_addr,
            "MASTER_PORT": self._master_port,
            "CUDA_VISIBLE_DEVICES": cuda_visible_devices,
        }
        for key, val in values.items():
            if val is not None:
                os.environ[key] = str(val)
        os.environ["REDIS_STORE_SERVER_HOST"] = str(self._master_addr).replace("[", "").replace("]", "")
        self.fused_worker_dict: dict = {}
        if os.getenv("WG_BACKEND") == "ray":  # a process of its own: the driver's watchdog may ask for its stacks
            from verl.single_controller.base.watchdog import install_stack_dump_handler, start_memory_heartbeat

            self._stack_file = install_stack_dump_handler()
            start_memory_heartbeat()  # the memory of this worker's node, for a report if the OS kills it

    def watchdog_process_info(self) -> tuple[str | None, int, str | None]:
        """``(Ray node id, pid, stack file)`` of this worker, for the driver's watchdog (a plain actor method)."""
        node_id = None
        if os.getenv("WG_BACKEND") == "ray":
            import ray

            node_id = ray.get_runtime_context().get_node_id()
        return node_id, os.getpid(), getattr(self, "_stack_file", None)

    @staticmethod
    def _normalize_visible_devices() -> None:
        """Fold ROCm's visibility variables into CUDA_VISIBLE_DEVICES; pick the device by local rank if Ray did not."""
        hip = os.environ.get("HIP_VISIBLE_DEVICES")
        cuda = os.environ.get("CUDA_VISIBLE_DEVICES")
        if hip is not None:
            assert cuda is None or cuda == hip, (
                f"HIP_VISIBLE_DEVICES={hip} and CUDA_VISIBLE_DEVICES={cuda} disagree; set only one"
            )
            os.environ["CUDA_VISIBLE_DEVICES"] = hip
            cuda = hip
        rocr = os.environ.pop("ROCR_VISIBLE_DEVICES", None)
        if rocr is not None:
            if cuda is not None:
                raise ValueError(
                    "ROCR_VISIBLE_DEVICES cannot be combined with CUDA_VISIBLE_DEVICES/HIP_VISIBLE_DEVICES"
                )
            os.environ["CUDA_VISIBLE_DEVICES"] = rocr
        from verl.utils.ray_utils import ray_noset_visible_devices

        if ray_noset_visible_devices() and "RAY_LOCAL_RANK" in os.environ:
            local_rank = os.environ["RAY_LOCAL_RANK"]
            os.environ["LOCAL_RANK"] = local_rank
            from verl.utils.device import get_torch_device, is_accelerator_available

            if is_accelerator_available():
                get_torch_device().set_device(int(local_rank))

    @property
    def world_size(self) -> int:
        return self._world_size

    @property
    def rank(self) -> int:
        return self._rank

    def get_master_addr_port(self) -> tuple[str, str]:
        return self._master_addr, self._master_port

    def get_cuda_visible_devices(self) -> str:
        return os.environ.get("CUDA_VISIBLE_DEVICES", "not set")

    def get_fused_worker_by_name(self, worker_name: str):
        return self.fused_worker_dict.get(worker_name)

    @register(dispatch_mode=Dispatch.DP_COMPUTE_PROTO_WITH_FUNC)
    def execute_with_func_generator(self, func, *args, **kwargs):
        """Run a driver-supplied function ``func(self, *args)`` on each worker's chunk of the data."""
        return func(self, *args, **kwargs)

    @register(dispatch_mode=Dispatch.ALL_TO_ALL, execute_mode=Execute.RANK_ZERO)
    def execute_func_rank_zero(self, func, *args, **kwargs):
        """Run ``func(*args, **kwargs)`` on rank 0 only."""
        return func(*args, **kwargs)
