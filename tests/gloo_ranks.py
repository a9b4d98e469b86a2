"""Run a test body on several spawned processes joined by one gloo process group.

Every multi-process test goes through ``spawn_gloo_ranks`` so the group is set up and torn down one way. The
teardown matters: each rank waits at a barrier, then leaves with ``os._exit(0)``. Without it a rank that finished
early exits while gloo's worker thread is still releasing the tensors of its last collective; that thread then needs
the GIL of an interpreter that is shutting down and the process aborts ("terminate called without an active
exception", SIGABRT), about once in 30 runs of an FSDP2 test on a 2-core box.
"""

from __future__ import annotations

import os
import socket
import sys
import time
from collections.abc import Callable

import torch.distributed as dist
import torch.multiprocessing as mp


def free_port() -> int:
    """A TCP port nobody listens on right now (for MASTER_PORT)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def publish_port(path: str, port: int) -> None:
    """Hand a port that this process has already bound to processes waiting in :func:`wait_for_port` (atomic: they
    never read a half-written file)."""
    with open(path + ".tmp", "w") as f:
        f.write(str(port))
    os.replace(path + ".tmp", path)


def wait_for_port(path: str, timeout_s: float = 120.0) -> int:
    """The port another process gave :func:`publish_port`."""
    deadline = time.monotonic() + timeout_s
    while not os.path.exists(path):
        if time.monotonic() > deadline:
            raise TimeoutError(f"no port was published at {path} within {timeout_s:.0f} s")
        time.sleep(0.05)
    with open(path) as f:
        return int(f.read())


def _rank_main(rank: int, body: Callable, world: int, port: int, args: tuple) -> None:
    os.environ.update(
        MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port), RANK=str(rank), LOCAL_RANK=str(rank), WORLD_SIZE=str(world)
    )
    dist.init_process_group("gloo", rank=rank, world_size=world)
    try:
        body(rank, *args)
        # An in-process vLLM engine tears the default group down when it is freed; nothing is left to wait for then.
        if dist.is_initialized():
            dist.barrier()
    except BaseException:
        if dist.is_initialized():
            dist.destroy_process_group()
        raise
    # Every rank is past its last collective: leave without the interpreter's shutdown. Tearing gloo down during
    # finalisation could still abort a rank ("terminate called without an active exception") about once in a
    # hundred runs even after the barrier; a process that exits here has nothing left to tear down.
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(0)


def spawn_gloo_ranks(body: Callable, world: int, *args) -> None:
    """Call ``body(rank, *args)`` on ``world`` spawned processes inside one gloo group; raises if any rank fails.

    ``body`` must be a module-level function (spawn pickles it by name).
    """
    mp.spawn(_rank_main, args=(body, world, free_port(), args), nprocs=world, join=True)
