"""Worker classes used by the single-controller tests (importable by Ray workers)."""

import os

import torch

from verl import DataProto
from verl.single_controller.base import Worker
from verl.single_controller.base.decorator import Dispatch, Execute, register
from verl.utils.debug import DistProfiler, DistProfilerExtension, ProfilerConfig


class AddWorker(Worker):
    """Adds ``initial_value + rank`` to the 'x' tensor of its chunk."""

    def __init__(self, initial_value: float = 0.0):
        super().__init__()
        self.value = initial_value

    @register(dispatch_mode=Dispatch.DP_COMPUTE_PROTO)
    def dp_compute(self, data: DataProto) -> DataProto:
        out = data.batch["x"] + self.value + self.rank
        return DataProto.from_dict({"x": out}, meta_info={"rank": self.rank})

    @register(dispatch_mode=Dispatch.DP_COMPUTE_PROTO, blocking=False)
    def double_later(self, data: DataProto) -> DataProto:
        """Non-blocking: the driver gets a DataProtoFuture."""
        return DataProto.from_dict({"x": data.batch["x"] * 2})

    @register(dispatch_mode=Dispatch.ONE_TO_ALL)
    def env(self) -> dict:
        keys = ["WORLD_SIZE", "RANK", "LOCAL_WORLD_SIZE", "LOCAL_RANK", "MASTER_ADDR", "MASTER_PORT"]
        keys += ["RAY_LOCAL_WORLD_SIZE", "RAY_LOCAL_RANK", "WG_BACKEND", "VERL_HOST_WORKERS"]
        return {k: os.environ.get(k) for k in keys}

    @register(dispatch_mode=Dispatch.ONE_TO_ALL)
    def add_scalar(self, x: float) -> float:
        return x + self.value + self.rank

    @register(dispatch_mode=Dispatch.ALL_TO_ALL)
    def per_worker(self, x: float) -> float:
        return x * 10 + self.rank

    @register(dispatch_mode=Dispatch.DP_COMPUTE)
    def dp_list(self, x: list) -> int:
        return sum(x)

    @register(dispatch_mode=Dispatch.DP_COMPUTE_METRIC)
    def metric(self, data: DataProto) -> float:
        return float(data.batch["x"].sum())

    @register(dispatch_mode=Dispatch.ALL_TO_ALL, execute_mode=Execute.RANK_ZERO)
    def rank_zero_only(self) -> int:
        return self.rank

    @register(dispatch_mode=Dispatch.ONE_TO_ALL)
    def all_reduce(self, value: float) -> float:
        """Form a torch.distributed group (gloo on CPU) and sum ``value * (rank + 1)`` over it."""
        import torch.distributed as dist

        from verl.utils.device import get_nccl_backend, get_torch_device, is_accelerator_available

        if not dist.is_initialized():
            dist.init_process_group(backend=get_nccl_backend(), rank=self.rank, world_size=self.world_size)
        device = f"{get_torch_device().__name__.split('.')[-1]}:{0}" if is_accelerator_available() else "cpu"
        tensor = torch.tensor([value * (self.rank + 1)], device=device)
        dist.all_reduce(tensor)
        return tensor.item()


class AsyncWorker(Worker):
    """Has an ``async def`` registered method, so Ray runs it as an async actor."""

    @register(dispatch_mode=Dispatch.DP_COMPUTE_PROTO, blocking=False)
    async def async_dp_compute(self, data: DataProto) -> DataProto:
        return DataProto.from_dict({"x": data.batch["x"] * 2})


class SubWorker(Worker):
    """A second role for colocation tests."""

    def __init__(self, initial_value: float = 0.0):
        super().__init__()
        self.value = initial_value

    @register(dispatch_mode=Dispatch.DP_COMPUTE_PROTO)
    def dp_compute(self, data: DataProto) -> DataProto:
        return DataProto.from_dict({"x": data.batch["x"] - self.value - self.rank})

    @register(dispatch_mode=Dispatch.ALL_TO_ALL)
    def sub(self, x: float) -> float:
        return x - self.value


class ProfiledWorker(Worker, DistProfilerExtension):
    """A worker with verl's profiler mixin: the group gets start_profile/stop_profile."""

    def __init__(self, save_path: str):
        super().__init__()
        config = ProfilerConfig(all_ranks=True, save_path=save_path)
        DistProfilerExtension.__init__(self, DistProfiler(rank=self.rank, config=config))

    @register(dispatch_mode=Dispatch.ONE_TO_ALL)
    @DistProfiler.annotate("work")
    def work(self) -> int:
        return sum(range(10))


class SlowRankZeroWorker(Worker):
    """Rank 0 takes ``RANK0_DELAY_S`` before it starts its register center (a slow process start-up); every rank
    notes when its construction began and when rank 0's address was known to it."""

    RANK0_DELAY_S = 3.0

    def __new__(cls, *args, **kwargs):
        import time

        began = time.time()
        if os.environ.get("RANK") == "0":
            time.sleep(cls.RANK0_DELAY_S)
        instance = super().__new__(cls)
        instance.began, instance.address_known = began, time.time()
        return instance

    @register(dispatch_mode=Dispatch.ALL_TO_ALL)
    def times(self) -> tuple[float, float, str]:
        return self.began, self.address_known, os.environ["MASTER_PORT"]


class SleepyWorker(Worker):
    """Rank ``sleepy_rank`` sleeps ``seconds`` in ``work``; the others return at once (a hung phase)."""

    def __init__(self, sleepy_rank: int = 1, seconds: float = 60.0):
        super().__init__()
        self.sleepy_rank, self.seconds = sleepy_rank, seconds

    @register(dispatch_mode=Dispatch.ONE_TO_ALL)
    def work(self) -> int:
        if self.rank == self.sleepy_rank:
            import time

            time.sleep(self.seconds)  # the line the watchdog names
        return self.rank

    @register(dispatch_mode=Dispatch.ONE_TO_ALL, blocking=False)
    def work_later(self) -> int:
        """``work``, called without waiting: the driver gets the refs and waits later."""
        return self.work()

    @register(dispatch_mode=Dispatch.DP_COMPUTE_PROTO, blocking=False)
    def double_later(self, data: DataProto) -> DataProto:
        """Twice ``data["x"]``, after ``work``'s sleep on the sleepy rank; non-blocking (a DataProtoFuture)."""
        self.work()
        return DataProto.from_dict({"x": data.batch["x"] * 2})


class DyingWorker(Worker):
    """Rank ``dying_rank`` is SIGKILLed in ``work``, as the OS's OOM killer would do."""

    def __init__(self, dying_rank: int = 1):
        super().__init__()
        self.dying_rank = dying_rank

    @register(dispatch_mode=Dispatch.ONE_TO_ALL)
    def work(self) -> int:
        if self.rank == self.dying_rank:
            import signal

            os.kill(os.getpid(), signal.SIGKILL)
        return self.rank

    @register(dispatch_mode=Dispatch.ONE_TO_ALL)
    def work_losing_a_peer(self) -> int:
        """The other ranks fail at once (as a collective fails when its peer is gone); ``dying_rank`` dies a moment
        later, so the peers' errors reach the driver first."""
        if self.rank != self.dying_rank:
            raise RuntimeError("Connection closed by peer")
        import signal
        import time

        time.sleep(1.0)
        os.kill(os.getpid(), signal.SIGKILL)
